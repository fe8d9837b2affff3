"""Transforms of FoPE (``fope``): the coefficients transposed or taken from head 0, the clipped
frequencies' sin padded with 1, the floor not applied."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..reference.fope import kept_frequencies
from .base import Arrays, Reference, Transform, call, register


def _fope_transposed(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    swapped = {name: np.swapaxes(np.asarray(inputs[name]), -1, -2)
               for name in ("cos_coef", "sin_coef")}
    return call(ref, {**inputs, **swapped}, params)


def _fope_kept(inputs: Arrays, params: dict[str, Any]) -> int:
    return len(kept_frequencies(_fope_ladder(inputs, params), params["base"],
                                params["max_position_embeddings"], params["num_inv_freq"]))


def _fope_ladder(inputs: Arrays, params: dict[str, Any]) -> int:
    """The width of the frequency ladder: rotary_dim, else the head."""
    return params.get("rotary_dim") or np.asarray(inputs["x"]).shape[-1]


def _fope_sin_one(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    x = np.asarray(inputs["x"], dtype=np.float64)
    out = np.array(call(ref, inputs, params))
    half, kept = x.shape[-1] // 2, _fope_kept(inputs, params)
    clipped = np.arange(kept, half)
    out[..., clipped] = x[..., clipped] - x[..., clipped + half]
    out[..., clipped + half] = x[..., clipped + half] + x[..., clipped]
    return out


def _fope_no_floor(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    half, kept = _fope_ladder(inputs, params) // 2, _fope_kept(inputs, params)
    grown = {}
    for name in ("cos_coef", "sin_coef"):
        coef = np.asarray(inputs[name], dtype=np.float64)
        full = np.broadcast_to(np.eye(half), (*coef.shape[:-2], half, half)).copy()
        full[..., :kept, :kept] = coef
        grown[name] = full
    return call(ref, {**inputs, **grown}, {**params, "num_inv_freq": half})


def _fope_first_head(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    first = {name: np.asarray(inputs[name])[:1] if np.ndim(inputs[name]) == 3
             else inputs[name] for name in ("cos_coef", "sin_coef")}
    return call(ref, {**inputs, **first}, params)


_FLOOR = ("base", "max_position_embeddings", "num_inv_freq")

register(
    fope_coefficients_transposed=Transform(
        "cos_coef and sin_coef transposed", _fope_transposed,
        inputs=("cos_coef", "sin_coef"), modules=("fope",)),
    fope_sin_padded_with_one=Transform(
        "the clipped pairs' sin padded with 1", _fope_sin_one, inputs=("x",),
        params=_FLOOR, modules=("fope",)),
    fope_floor_not_applied=Transform(
        "every frequency kept (identity coefficients past the floor)", _fope_no_floor,
        inputs=("x", "cos_coef", "sin_coef"), params=_FLOOR, modules=("fope",)),
    fope_first_head_for_all=Transform(
        "coefficient head 0 for every head", _fope_first_head,
        inputs=("cos_coef", "sin_coef"), modules=("fope",)),
)
