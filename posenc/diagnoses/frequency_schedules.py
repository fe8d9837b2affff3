"""Transforms of the frequency schedules (``rope_frequencies``, ``vllm_rope_frequencies``):
Hunyuan's NTK-alpha read as plain dynamic NTK, vLLM's mixed NTK without its mixed_b."""

from __future__ import annotations

from typing import Any

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


register(
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
