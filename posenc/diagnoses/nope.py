"""Transforms of NoPE (``nope``): rope applied on a layer that has none."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..reference.rope import rope
from .base import Arrays, Reference, Transform, call, positions, register


def _rope_on_nope(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    x = np.asarray(call(ref, inputs, params))
    return rope(x, positions(inputs), base=10000.0, layout="half", rotary_dim=None,
                scaling=None, seq_len=None)


register(
    rope_on_nope_layer=Transform("RoPE (theta 10000, half) applied", _rope_on_nope,
                                 inputs=("x",), modules=("nope",)),
)
