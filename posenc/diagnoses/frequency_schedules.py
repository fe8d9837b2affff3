"""Transforms of the frequency schedules (``rope_frequencies``, ``vllm_rope_frequencies``):
Hunyuan's NTK-alpha read as plain dynamic NTK, vLLM's mixed NTK without its mixed_b, Llama 3.1's
bands decided by the next pair, YaRN's truncate ignored, NTK's base exponent d/d for d/(d-2)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .base import Arrays, Reference, Transform, call, register

# keys Hunyuan's dicts carry beside alpha that a dynamic reading does not take
_ALPHA_KEYS = ("alpha", "beta_fast", "beta_slow", "mscale", "mscale_all_dim")


def _is_alpha(scaling: Any) -> bool:
    if not scaling:
        return False
    name = scaling.get("rope_type", scaling.get("type"))
    return name == "ntk_alpha" or (name in ("dynamic", "xdrope") and bool(scaling.get("alpha")))


def _transformers_alpha_as_dynamic(ref: Reference, inputs: Arrays,
                                   params: dict[str, Any]) -> Any:
    """transformers' dynamic NTK for the dict without alpha (factor 1 when it names none);
    without a trained length the length is within it, where dynamic is the default ladder."""
    scaling = params["scaling"]
    if not _is_alpha(scaling):
        return call(ref, inputs, params)
    plain = {k: v for k, v in scaling.items() if k not in (*_ALPHA_KEYS, "type")}
    if scaling.get("max_position_embeddings") or scaling.get("original_max_position_embeddings"):
        plain.update(rope_type="dynamic", factor=scaling.get("factor") or 1.0)
    else:
        plain = {k: v for k, v in plain.items() if k in ("rope_theta",)}
        plain["rope_type"] = "default"
    return call(ref, inputs, {**params, "scaling": plain})


def _vllm_alpha_as_dynamic(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    """vLLM's DynamicNTKScalingRotaryEmbedding for the dict without alpha (factor 1 when it
    names none: fixed at max_position, the default ladder)."""
    rope = params["rope_parameters"]
    if not rope or rope.get("rope_type") != "dynamic" or "alpha" not in rope:
        return call(ref, inputs, params)
    plain = {k: v for k, v in rope.items() if k not in _ALPHA_KEYS}
    plain["factor"] = rope.get("factor") or 1.0
    return call(ref, inputs, {**params, "rope_parameters": plain})


def _vllm_mixed_b_dropped(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    rope = params["rope_parameters"]
    if not rope or "mixed_b" not in rope:
        return call(ref, inputs, params)
    plain = {k: v for k, v in rope.items() if k != "mixed_b"}
    return call(ref, inputs, {**params, "rope_parameters": plain})


def _name(scaling: Any) -> str:
    return (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))


def _default_of(scaling: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The default ladder over the same rotated width and rope_theta."""
    kept = {k: scaling[k] for k in ("rope_theta", "partial_rotary_factor") if k in scaling}
    return {**kept, "rope_type": "default", **extra}


def _llama3_band_of_next_pair(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    """Llama 3.1's band and smoothing of pair i read off pair i + 1's wavelength (an index
    counted from one): the band edges move by one pair."""
    scaling = params["scaling"]
    if _name(scaling) != "llama3":
        return call(ref, inputs, params)
    inv, attention = call(ref, inputs, {**params, "scaling": _default_of(scaling)})
    inv = np.asarray(inv, dtype=np.float64)
    r = 2 * inv.size
    base = float(scaling.get("rope_theta") or params["base"])
    wavelength = 2 * math.pi / (inv * base ** (-2.0 / r))  # the next pair's
    s, trained = scaling["factor"], scaling["original_max_position_embeddings"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    smooth = np.clip((trained / wavelength - low) / (high - low), 0.0, 1.0)
    return (inv * ((1 - smooth) / s + smooth)).astype(np.asarray(inv).dtype), attention


def _yarn_always_truncated(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    scaling = params["scaling"]
    if _name(scaling) != "yarn" or scaling.get("truncate", True):
        return call(ref, inputs, params)
    return call(ref, inputs, {**params, "scaling": {**scaling, "truncate": True}})


def _ntk_exponent_one(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    """NTK-aware base' = base·s where it is base·s^(d/(d-2)) (static NTK and NTK-alpha; dynamic
    NTK's factor at the call's length likewise)."""
    scaling = params["scaling"]
    name = _name(scaling)
    if name not in ("ntk", "dynamic") or _is_alpha(scaling):
        return call(ref, inputs, params)
    base = float(scaling.get("rope_theta") or params["base"])
    if name == "ntk":
        s = scaling["factor"]
    else:
        trained = scaling.get("max_position_embeddings") or \
            scaling["original_max_position_embeddings"]
        length = trained if params.get("seq_len") is None else max(params["seq_len"], trained)
        s = scaling["factor"] * length / trained - (scaling["factor"] - 1)
    plain = _default_of(scaling, rope_theta=base * s)
    return call(ref, inputs, {**params, "scaling": plain})


register(
    llama3_band_of_next_pair=Transform(
        "Llama 3.1's bands decided by pair i + 1's wavelength", _llama3_band_of_next_pair,
        params=("scaling", "base"), modules=("rope_frequencies",)),
    yarn_truncate_ignored=Transform(
        "YaRN's correction range floored/ceiled although truncate is false", _yarn_always_truncated,
        params=("scaling",), modules=("rope_frequencies",)),
    ntk_base_exponent_one=Transform(
        "NTK's base × s, not × s^(d/(d-2))", _ntk_exponent_one,
        params=("scaling", "base", "seq_len"), modules=("rope_frequencies",)),
    ntk_alpha_read_as_dynamic=Transform(
        "alpha dropped: the dict read as dynamic NTK", _transformers_alpha_as_dynamic,
        params=("scaling", "seq_len"), modules=("rope_frequencies",)),
    vllm_alpha_read_as_dynamic=Transform(
        "alpha dropped: DynamicNTKScalingRotaryEmbedding", _vllm_alpha_as_dynamic,
        params=("rope_parameters",), modules=("vllm_rope_frequencies",)),
    vllm_mixed_b_ignored=Transform(
        "mixed_b dropped: the fixed NTK rule", _vllm_mixed_b_dropped,
        params=("rope_parameters",), modules=("vllm_rope_frequencies",)),
)
