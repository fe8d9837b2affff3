"""transformers rope -> vLLM ``get_rope`` keyword arguments, and back.

vLLM (vllm/model_executor/layers/rotary_embedding/__init__.py) takes
``get_rope(head_size, max_position, is_neox_style, rope_parameters, dtype)`` with a
transformers-shaped ``rope_parameters`` dict; ``partial_rotary_factor`` lives in it. Where vLLM
reads a dict differently the translation renames (YaRN with ``mscale``/``mscale_all_dim`` ->
``deepseek_yarn``, which is the class that honours them; an explicit YaRN
``attention_factor`` -> vLLM's ``attn_factor`` multiplier; posenc's NTK-aware ``ntk`` -> the
default rule at its scaled ``rope_theta``, since vLLM's ``ntk`` is another schedule; Hunyuan's
``ntk_alpha`` -> ``dynamic`` with ``alpha``, as its checkpoints spell it) and the spec records what cannot be
matched (see :data:`DIVERGENCES`).
"""

from __future__ import annotations

import math
from typing import Any

from .. import params as checks
from ..errors import ParameterError
from .transformers import RopeLayer, require_layer, require_qwen_mrope

DIVERGENCES = {
    "dynamic": "vLLM's DynamicNTKScalingRotaryEmbedding fixes the base at the maximum length "
               "max_position * factor for every sequence; transformers rescales by the current "
               "length and keeps the default frequencies up to max_position_embeddings",
    "longrope": "vLLM's Phi3LongRoPEScaledRotaryEmbedding picks the long factors once, when "
                "max_model_len > original_max_position_embeddings, for every position; "
                "transformers picks them per forward, when the sequence is longer",
}


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def to_vllm(layer: RopeLayer) -> dict[str, Any]:
    """Keyword arguments of vLLM's ``get_rope`` for ``layer`` (``dtype`` left to the caller)."""
    require_layer(layer)
    require_qwen_mrope(layer, "vLLM's get_rope runs (MRotaryEmbedding; its XDRotaryEmbedding "
                       "cuts xdrope_section over the r/2 frequencies, not transformers' doubled "
                       "vector)")
    scaling = {k: v for k, v in layer.scaling.items() if k != "max_position_embeddings"}
    name = layer.rope_type
    if name == "proportional":
        raise ParameterError("rope_type='proportional' has no vLLM get_rope equivalent in the "
                             "generic factory (vLLM builds it per model)")
    if name == "ntk":  # posenc's NTK-aware base * s^(r/(r-2)); vLLM's 'ntk' is another rule
        r = layer.resolve().rotary_dim
        theta = float(scaling.get("rope_theta", 10000.0))
        scaling = {"rope_type": "default",
                   "rope_theta": theta * float(scaling["factor"]) ** (r / (r - 2)),
                   **{k: scaling[k] for k in ("partial_rotary_factor",) if k in scaling}}
    if name == "ntk_alpha":  # vLLM reads Hunyuan's label: 'dynamic' with an 'alpha' key
        scaling = {"rope_type": "dynamic", "alpha": scaling["alpha"],
                   **{k: scaling[k] for k in ("rope_theta",) if k in scaling}}
    if name == "yarn":
        factor = scaling.get("factor")
        if factor is None:
            factor = layer.scaling["max_position_embeddings"] / \
                scaling["original_max_position_embeddings"]
            scaling["factor"] = factor
        explicit = scaling.pop("attention_factor", None)
        if scaling.get("mscale") and scaling.get("mscale_all_dim"):
            scaling["rope_type"] = "deepseek_yarn"
            if scaling.pop("truncate", True) is False:
                raise ParameterError("truncate=False with mscale/mscale_all_dim: vLLM's "
                                     "deepseek_yarn always truncates the correction range")
        else:
            scaling.pop("mscale", None)
            scaling.pop("mscale_all_dim", None)
        if explicit is not None:  # vLLM multiplies its own mscale by attn_factor
            if scaling["rope_type"] == "deepseek_yarn":
                own = (_yarn_mscale(factor, scaling["mscale"])
                       / _yarn_mscale(factor, scaling["mscale_all_dim"]))
            else:
                own = _yarn_mscale(factor)
            scaling["attn_factor"] = float(explicit) / own
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
    if params.get("rope_type") == "deepseek_yarn":
        params["rope_type"] = "yarn"
    if "attn_factor" in params:
        factor = float(params["factor"])
        own = (_yarn_mscale(factor, params["mscale"]) / _yarn_mscale(factor, params["mscale_all_dim"])
               if params.get("mscale") and params.get("mscale_all_dim") else _yarn_mscale(factor))
        params["attention_factor"] = params.pop("attn_factor") * own
    params.setdefault("rope_theta", 10000.0)
    return params
