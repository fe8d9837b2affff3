"""Transforms of MLA's decoupled rope (``mla_rope``): the rotary slice at the front of q, the
softmax scale's mscale once, not at all or twice (on cos/sin too)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import Arrays, Reference, Transform, call, register


def _mla_leading_slice(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    """q's first r features rotated: move them last, rotate, move them back."""
    q = np.asarray(inputs["q"])
    r = np.asarray(inputs["k_rot"]).shape[-1]
    moved = np.concatenate([q[..., r:], q[..., :r]], axis=-1)
    q_out, k_out, scale = call(ref, {**inputs, "q": moved}, params)
    nope = q.shape[-1] - r
    return np.concatenate([q_out[..., nope:], q_out[..., :nope]], axis=-1), k_out, scale


def _mla_scale(power: int) -> Any:
    def apply(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
        q_out, k_out, _ = call(ref, inputs, params)
        scale = np.asarray(inputs["q"]).shape[-1] ** -0.5
        scaling = params.get("scaling") or {}
        factor, m = scaling.get("factor") or 1.0, scaling.get("mscale_all_dim") or 0.0
        if power and m and factor > 1:
            scale *= (0.1 * m * np.log(factor) + 1.0) ** power
        return q_out, k_out, scale
    return apply


def _mla_mscale_twice(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    """cos/sin × YaRN's 0.1·mscale·ln s + 1 (DeepSeek's ratio over mscale_all_dim's factor
    dropped) on top of the softmax scale's mscale²."""
    scaling = params.get("scaling") or {}
    factor = scaling.get("factor") or 1.0
    if factor <= 1 or not scaling.get("mscale_all_dim"):
        return call(ref, inputs, params)
    doubled = {**scaling, "attention_factor": 0.1 * (scaling.get("mscale") or 1.0) * np.log(factor) + 1.0}
    return call(ref, inputs, {**params, "scaling": doubled})


register(
    mla_mscale_twice=Transform("cos/sin × YaRN's mscale as well as the softmax scale × mscale²",
                               _mla_mscale_twice, params=("scaling",), modules=("mla_rope",)),
    mla_rope_on_leading_slice=Transform(
        "rope on q's first qk_rope_head_dim features", _mla_leading_slice,
        inputs=("q", "k_rot"), modules=("mla_rope",)),
    mla_mscale_once=Transform("softmax scale × mscale (not squared)", _mla_scale(1),
                              inputs=("q",), params=("scaling",), modules=("mla_rope",)),
    mla_mscale_missing=Transform("softmax scale qk_head_dim^-0.5", _mla_scale(0),
                                 inputs=("q",), params=("scaling",), modules=("mla_rope",)),
)
