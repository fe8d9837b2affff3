"""Transforms of CoPE (``cope``): the reference's own bug knobs (:func:`cope_variant`) and the
gates of padded keys counted."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..reference.cope import cope_variant
from .base import Arrays, Reference, Transform, register


def _variant(**bug: Any) -> Any:
    def apply(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
        return cope_variant(inputs["q"], inputs["k"], inputs["pos_emb"], **params,
                            key_mask=inputs.get("key_mask"), **bug)
    return apply


def _padded_gates_counted(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    """Every key's gate counted, the term still 0 on the padded keys."""
    out = cope_variant(inputs["q"], inputs["k"], inputs["pos_emb"], **params)
    if inputs.get("key_mask") is None:
        return out
    real = np.asarray(inputs["key_mask"], dtype=bool)
    batch = out.ndim - 2
    shape = (real.shape[0], *([1] * (batch - 1)), 1, real.shape[1]) if batch else real.shape[1:]
    return np.where(np.reshape(real, shape), out, 0.0)


_INPUTS = ("q", "k", "pos_emb")

register(
    cope_count_from_start=Transform(
        "positions summed over keys 0..j", _variant(count="from_start"), inputs=_INPUTS,
        modules=("cope",)),
    cope_positions_not_clamped=Transform(
        "positions unclamped, rows past the table read 0", _variant(clamp=False),
        inputs=_INPUTS, modules=("cope",)),
    cope_interpolation_weights_swapped=Transform(
        "p − ⌊p⌋ on the floor row", _variant(swap_weights=True), inputs=_INPUTS,
        modules=("cope",)),
    cope_padded_gates_counted=Transform(
        "the gates of padded keys counted", _padded_gates_counted,
        inputs=(*_INPUTS, "key_mask"), modules=("cope",)),
)
