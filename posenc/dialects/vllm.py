"""transformers rope -> vLLM ``get_rope`` keyword arguments, and back, for vLLM 0.32.0
(:data:`VLLM_VERSION`; checked against that release by tests/peers/test_vllm_engine.py).

vLLM (vllm/model_executor/layers/rotary_embedding/__init__.py) takes
``get_rope(head_size, max_position, is_neox_style, rope_parameters, dtype)`` with a
transformers-shaped ``rope_parameters`` dict; ``partial_rotary_factor`` lives in it. Its
generic YaRN reads ``attention_factor``, ``mscale``/``mscale_all_dim`` and ``truncate`` as
transformers does, so YaRN passes as is (with ``factor`` derived where transformers derives
it: vLLM raises TypeError on a missing one). Where vLLM reads a dict differently the
translation renames (posenc's NTK-aware ``ntk`` -> the default rule at its scaled
``rope_theta``, since vLLM's ``ntk`` is another schedule; Hunyuan's ``ntk_alpha`` ->
``dynamic`` with ``alpha``, as its checkpoints spell it) and the spec records what cannot be
matched (see :data:`DIVERGENCES`).
"""

from __future__ import annotations

import math
from typing import Any

from .. import params as checks
from ..encodings.vllm_rope_frequencies import VLLM_VERSION
from ..errors import ParameterError
from .transformers import RopeLayer, require_layer, require_qwen_mrope

DIVERGENCES = {
    "dynamic": f"vLLM {VLLM_VERSION}'s DynamicNTKScalingRotaryEmbedding computes the base once, "
               "at max_position against max_trained_positions (default max_position: the base "
               "is unchanged), in a cos/sin cache of max_position rows; transformers keeps the "
               "default frequencies up to max_position_embeddings and grows the base beyond. "
               "vLLM's server admits max_position_embeddings * factor tokens that the cache "
               "does not hold (docs/known-issues.md)",
    "longrope": f"vLLM {VLLM_VERSION}'s Phi3LongRoPEScaledRotaryEmbedding picks the long factors once, when "
                "max_model_len > original_max_position_embeddings, for every position; "
                "transformers picks them per forward, when the sequence is longer",
}


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


__all__ = ["DIVERGENCES", "VLLM_VERSION", "from_vllm", "to_vllm"]


def to_vllm(layer: RopeLayer) -> dict[str, Any]:
    """Keyword arguments of vLLM's ``get_rope`` for ``layer`` (``dtype`` left to the caller)."""
    require_layer(layer)
    require_qwen_mrope(layer, "vLLM's get_rope runs (MRotaryEmbedding; its XDRotaryEmbedding "
                       "cuts xdrope_section over the r/2 frequencies, not transformers' doubled "
                       "vector)")
    scaling = {k: v for k, v in layer.scaling.items() if k != "max_position_embeddings"}
    name = layer.rope_type
    if name == "proportional" and scaling.get("factor") not in (None, 1, 1.0):
        raise ParameterError(f"rope_type='proportional' with factor {scaling['factor']!r}: vLLM "
                             f"{VLLM_VERSION}'s Gemma4RotaryEmbedding does not read factor")
    if name == "proportional":
        scaling.pop("factor", None)
    if name == "ntk":  # posenc's NTK-aware base * s^(r/(r-2)); vLLM's 'ntk' is another rule
        r = layer.resolve().rotary_dim
        theta = float(scaling.get("rope_theta", 10000.0))
        scaling = {"rope_type": "default",
                   "rope_theta": theta * float(scaling["factor"]) ** (r / (r - 2)),
                   **{k: scaling[k] for k in ("partial_rotary_factor",) if k in scaling}}
    if name == "ntk_alpha":  # vLLM reads Hunyuan's label: 'dynamic' with an 'alpha' key
        scaling = {"rope_type": "dynamic", "alpha": scaling["alpha"],
                   **{k: scaling[k] for k in ("rope_theta",) if k in scaling}}
    if name == "yarn" and scaling.get("factor") is None:  # transformers derives it
        scaling["factor"] = layer.scaling["max_position_embeddings"] / \
            scaling["original_max_position_embeddings"]
    out: dict[str, Any] = {
        "head_size": layer.head_dim,
        "max_position": layer.max_position_embeddings,
        "is_neox_style": not layer.interleaved,
        "rope_parameters": scaling,
    }
    if out["max_position"] is None:
        raise ParameterError("config has no 'max_position_embeddings', which vLLM's get_rope "
                             "needs as max_position")
    return out


def from_vllm(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A transformers ``rope_parameters`` dict for vLLM ``get_rope`` keyword arguments."""
    checks.mapping("kwargs", kwargs)
    checks.mapping("rope_parameters", kwargs.get("rope_parameters"), optional=True)
    params = dict(kwargs.get("rope_parameters") or {})
    if params.get("rope_type") == "ntk":
        raise ParameterError("vLLM's rope_type 'ntk' (fixed NTK, or mixed NTK with mixed_b) has "
                             "no transformers equivalent (posenc.rope_frequencies' 'ntk' is "
                             "the NTK-aware base rule, another schedule): use "
                             "posenc.vllm_rope_frequencies")
    if "attn_factor" in params:
        raise ParameterError(f"rope_parameters has key 'attn_factor', which vLLM {VLLM_VERSION}'s "
                             "get_rope never reads: give YaRN's 'attention_factor'")
    if params.get("rope_type") == "dynamic" and "max_trained_positions" in params:
        raise ParameterError("vLLM's dynamic NTK with max_trained_positions is fixed for every "
                             "length; transformers' dynamic NTK has no such form")
    if params.get("rope_type") == "deepseek_yarn":  # always truncates; no attention_factor
        params["rope_type"] = "yarn"
        params.pop("truncate", None)
        factor = float(params["factor"])
        params["attention_factor"] = (_yarn_mscale(factor, float(params.get("mscale", 1.0)))
                                      / _yarn_mscale(factor, float(params.get("mscale_all_dim")
                                                                   or 0.0)))
    params.setdefault("rope_theta", 10000.0)
    return params
