"""Transforms of rotary position embedding (``rope``): the rotary slice at the wrong end or
over the full width, the attention factor left out, the angles rounded to bfloat16."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..rotary.schedules import rotary_width
from .base import (
    Arrays,
    Reference,
    Transform,
    call,
    register,
    rotary_call,
    round_significand,
    rows_of,
)


def _rotary_width(inputs: Arrays, params: dict[str, Any]) -> int:
    dim = np.asarray(inputs["x"]).shape[-1]
    return params["rotary_dim"] or rotary_width(dim, params["scaling"])


def _rotary_on_last_dims(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    x = np.asarray(inputs["x"])
    rd, dim = _rotary_width(inputs, params), x.shape[-1]
    moved = np.concatenate([x[..., dim - rd:], x[..., :dim - rd]], axis=-1)
    out = np.asarray(call(ref, {**inputs, "x": moved}, {**params, "rotary_dim": rd}))
    return np.concatenate([out[..., rd:], out[..., :rd]], axis=-1)


def _full_width(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    return call(ref, inputs, {**params, "rotary_dim": np.asarray(inputs["x"]).shape[-1]})


def _no_attention_factor(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    scaling = params["scaling"]
    if scaling:
        scaling = {**scaling, "attention_factor": 1.0}
    return call(ref, inputs, {**params, "scaling": scaling})


def _angles_bfloat16(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    """The reference's rotation with every angle m·θ_i rounded to bfloat16 before cos/sin."""
    x, pos, thetas, attention, a, b = rotary_call(inputs, params)
    angles = rows_of(x, round_significand(pos[..., None].astype(np.float64) * thetas, 8), pos)
    cos, sin = np.cos(angles) * attention, np.sin(angles) * attention
    out = x.copy()
    out[..., a] = x[..., a] * cos - x[..., b] * sin
    out[..., b] = x[..., b] * cos + x[..., a] * sin
    return out


register(
    rotary_on_last_dims=Transform("the last rotary_dim features rotated", _rotary_on_last_dims,
                                  inputs=("x",), params=("rotary_dim",), modules=("rope",)),
    partial_rotary_on_full_width=Transform("rotary_dim = the full width", _full_width,
                                           inputs=("x",), params=("rotary_dim",)),
    attention_factor_missing=Transform("scaling attention_factor = 1", _no_attention_factor,
                                       params=("scaling",), modules=("rope", "rope_frequencies")),
    angles_in_bfloat16=Transform("angles m·θ rounded to bfloat16", _angles_bfloat16,
                                 inputs=("x", "positions"), modules=("rope",)),
)
