"""vLLM's rope frequencies: what ``get_rope(head_size, max_position, rope_parameters=...)``
builds, for each rope_type, as the inverse frequencies and the factor on cos/sin that a
position sees (vllm/model_executor/layers/rotary_embedding/). Host-side, like
:func:`posenc.rope_frequencies`, whose schedules it reuses where vLLM computes the same thing,
at the length vLLM fixes them: dynamic NTK at ``max_position * factor``, LongRoPE's factors by
``max_model_len``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .. import array_api, params
from ..errors import ParameterError
from .rope_frequencies import schedule

__all__ = ["vllm_rope_frequencies"]

ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "deepseek_yarn", "llama3", "longrope")
_VLLM_ONLY = {"yarn": {"attn_factor"}, "deepseek_yarn": {"attn_factor"},
              "longrope": {"short_mscale", "long_mscale"}}


def _mscale(scale: float, m: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def _number(given: Mapping[str, Any], key: str, default: float) -> float:
    value = given.get(key)
    return default if value is None else params.positive(f"rope_parameters[{key!r}]", value)


def vllm_rope_frequencies(head_size: int, *, max_position: int,
                          rope_parameters: Mapping[str, Any] | None = None,
                          max_model_len: int | None = None, dtype: Any = None,
                          device: Any = None) -> tuple[Any, float]:
    """``(inv_freq, attention_factor)`` of vLLM's ``get_rope(head_size, max_position,
    rope_parameters=...)`` for a server started with ``max_model_len`` (default
    ``max_position``). Where vLLM departs from transformers: ``dynamic`` is fixed at
    ``max_position * factor`` for every sequence; ``longrope`` uses the long factors for every
    position once ``max_model_len > original_max_position_embeddings``; ``yarn`` ignores
    ``mscale``/``mscale_all_dim``/``attention_factor`` (``deepseek_yarn`` honours the first two,
    ``attn_factor`` multiplies either)."""
    head_size = params.integer("head_size", head_size, minimum=2)
    max_position = params.integer("max_position", max_position, minimum=1)
    max_model_len = max_position if max_model_len is None else \
        params.integer("max_model_len", max_model_len, minimum=1)
    given = dict(rope_parameters or {})
    kind = given.get("rope_type", "default")
    if kind not in ROPE_TYPES:
        raise ParameterError(f"rope_parameters['rope_type']={kind!r} is not one of "
                             f"{', '.join(map(repr, ROPE_TYPES))} (vLLM's get_rope)")
    extra = {k: given.pop(k) for k in list(given) if k in _VLLM_ONLY.get(kind, ())}
    seq_len = None
    attention = None
    if kind == "dynamic":  # the base at max_len = max_position * factor, for every length
        factor = _number(given, "factor", 1.0)
        rotary = schedule(head_size, scaling={k: v for k, v in given.items()
                                              if k in ("rope_theta", "partial_rotary_factor")})
        r = rotary.rotary_dim
        if r <= 2:
            raise ParameterError(f"rope_type 'dynamic' needs a rotary width > 2, got {r}")
        base = _number(given, "rope_theta", 10000.0)
        scaled = base * (factor * factor - (factor - 1)) ** (r / (r - 2))
        given = {"rope_type": "default", "rope_theta": scaled,
                  **({"partial_rotary_factor": given["partial_rotary_factor"]}
                     if "partial_rotary_factor" in given else {})}
    elif kind in ("yarn", "deepseek_yarn"):
        factor = _number(given, "factor", 1.0)
        if kind == "yarn":
            for key in ("mscale", "mscale_all_dim", "attention_factor"):
                given.pop(key, None)  # vLLM's YaRNScalingRotaryEmbedding never reads them
            attention = _mscale(factor)
        else:
            given.pop("truncate", None)  # DeepseekScalingRotaryEmbedding always truncates
            attention = (_mscale(factor, _number(given, "mscale", 1.0))
                         / _mscale(factor, given.get("mscale_all_dim") or 0.0))
            given.pop("mscale", None)
            given.pop("mscale_all_dim", None)
            given.pop("attention_factor", None)
        given["rope_type"] = "yarn"
        attention *= _number(extra, "attn_factor", 1.0)
    elif kind == "longrope":
        trained = params.integer("rope_parameters['original_max_position_embeddings']",
                                  given.get("original_max_position_embeddings"), minimum=1)
        given["max_position_embeddings"] = max_position
        given.pop("factor", None)  # vLLM's scale is max_position / original
        seq_len = max_model_len if max_model_len > trained else trained
        key = "long_mscale" if max_model_len > trained else "short_mscale"
        if extra.get(key) is not None:
            attention = _number(extra, key, 1.0)
    resolved = schedule(head_size, scaling=given, seq_len=seq_len)
    if attention is None:
        attention = resolved.attention_factor
    xp = array_api.namespace_of_dtype(dtype)
    out = array_api.output_dtype(xp, dtype)
    return array_api.asarray(xp, resolved.inv_freq, dtype=out, device=device), float(attention)
