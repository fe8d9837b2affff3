"""The ``config.json`` keys a published checkpoint carries that transformers' config class
drops, and vLLM's model code reads: added to the shrunk config the vLLM sweep saves.

transformers 5 rewrote several families' configs (rope into ``rope_parameters``, layer
plans into ``layer_types`` / ``mlp_layer_types``, no ``head_dim`` where it is hidden /
heads); vLLM 0.32's model classes still read the checkpoint's original keys, and a config
that transformers saved raises ``AttributeError`` in them. Each key below is derived from
the transformers config the sweep built, so it states the same model (the same head size,
rotary width, base and layer plan) the way the checkpoint's ``config.json`` spells it; the
report lists the keys added. Keys the config already has are kept, but those of
:data:`REWRITTEN`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

Config = dict[str, Any]


def _rope(config: Config, key: str, default: Any = None) -> Any:
    params = config.get("rope_parameters") or {}
    if params and all(isinstance(v, dict) for v in params.values()):
        params = params.get("full_attention") or next(iter(params.values()))
    return params.get(key, config.get(key, default))


def _head_dim(config: Config) -> int:
    return int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])


def _leading_dense(config: Config) -> int:
    plan = config.get("mlp_layer_types") or []
    dense = 0
    while dense < len(plan) and plan[dense] == "dense":
        dense += 1
    return dense


def _mimo_v2(config: Config) -> Config:
    sliding = [t == "sliding_attention" for t in config.get("layer_types") or []]
    params = config.get("rope_parameters") or {}
    local = params.get("sliding_attention") or {}
    return {"hybrid_layer_pattern": [int(s) for s in sliding],
            "moe_layer_freq": [int(t == "sparse") for t in config.get("mlp_layer_types") or []],
            "swa_num_attention_heads": config["num_attention_heads"],
            "swa_num_key_value_heads": config["num_key_value_heads"],
            "swa_head_dim": _head_dim(config), "swa_v_head_dim": config.get("v_head_dim"),
            "sliding_window_size": config.get("sliding_window"),
            "layernorm_epsilon": config.get("rms_norm_eps"),
            "rope_theta": _rope(config, "rope_theta"),
            "swa_rope_theta": local.get("rope_theta", _rope(config, "rope_theta")),
            "partial_rotary_factor": _rope(config, "partial_rotary_factor", 1.0)}


# Keys whose saved value is rewritten, not only filled in: DBRX's attn_config gains the
# rope_theta vLLM reads there, and LFM2-MoE's num_dense_layers leaves one MoE layer (vLLM
# requires one; the shrunk config's layers were all dense)
REWRITTEN = ("attn_config", "num_dense_layers")

# model_type -> the keys its checkpoint's config.json states, from the transformers config
HUB_KEYS: dict[str, Callable[[Config], Config]] = {
    "afmoe": lambda c: {"score_func": "sigmoid", "route_norm": True, "n_group": 1,
                        "topk_group": 1},
    "minimax_m2": lambda c: {
        "rotary_dim": int(_head_dim(c) * _rope(c, "partial_rotary_factor", 1.0)),
        "scoring_func": "sigmoid"},
    "glm4_moe": lambda c: {"head_dim": _head_dim(c)},
    "glm4_moe_lite": lambda c: {"first_k_dense_replace": _leading_dense(c)},
    "hy_v3": lambda c: {"first_k_dense_replace": _leading_dense(c), "route_norm": True,
                        "expert_hidden_dim": c.get("moe_intermediate_size")},
    "lfm2": lambda c: {"block_dim": c["hidden_size"], "conv_dim": c["hidden_size"],
                       "block_ff_dim": c["intermediate_size"]},
    # and one MoE layer: vLLM requires one, and the shrunk config's two layers were both dense
    "lfm2_moe": lambda c: {"layer_types": c.get("layer_types")
                           or ["full_attention"] * c["num_hidden_layers"],
                           "num_dense_layers": min(c.get("num_dense_layers") or 0,
                                                   c["num_hidden_layers"] - 1)},
    "longcat_flash": lambda c: {"mla_scale_q_lora": True, "mla_scale_kv_lora": True,
                                "zero_expert_type": "identity", "hidden_dim": c["hidden_size"]},
    "mimo_v2_flash": _mimo_v2,
    "dbrx": lambda c: {"attn_config": {**(c.get("attn_config") or {}),
                                       "rope_theta": _rope(c, "rope_theta")}},
}


def add(config_json: Path) -> dict[str, Any]:
    """Add to the saved ``config_json`` the checkpoint keys its model type lacks; returns
    those added (empty for a family that needs none)."""
    config = json.loads(config_json.read_text())
    derive = HUB_KEYS.get(str(config.get("model_type")))
    if derive is None:
        return {}
    added: dict[str, Any] = {}
    for key, value in derive(config).items():
        if key in REWRITTEN or config.get(key) is None:
            if value is not None and config.get(key) != value:
                added[key] = value
    config.update(added)
    config_json.write_text(json.dumps(config, indent=2))
    return added
