"""Transforms of the 2-D vision ropes (``pixtral_rope``, ``llama4_vision_rope``): Pixtral read
as axial, the grid's axes swapped, the CLS token at the origin."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..reference.axial_rope import axial_rope
from .base import Arrays, Reference, Transform, call, register


def _grid(inputs: Arrays, params: dict[str, Any]) -> np.ndarray:
    """positions as [seq, 2] (row, column); flat ids split by params['max_width']."""
    positions = np.asarray(inputs["positions"])
    if positions.ndim == 1:
        width = params["max_width"]
        return np.stack([positions // width, positions % width], axis=1)
    return positions


def _pixtral_as_axial(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    x = np.asarray(inputs["x"])
    half = x.shape[-1] // 2
    return axial_rope(x, _grid(inputs, params), axes_dims=[half, half], base=params["base"],
                      layout="half")


def _axes_swapped(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    grid = _grid(inputs, params)
    swapped = np.where(grid < 0, grid, grid[:, ::-1])  # a CLS marker stays one
    return call(ref, {**inputs, "positions": swapped}, params)


def _cls_at_origin(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    return call(ref, {**inputs, "positions": np.maximum(np.asarray(inputs["positions"]), 0)},
                params)


register(
    pixtral_as_axial=Transform("axial_rope with axes_dims [d/2, d/2]", _pixtral_as_axial,
                               inputs=("x", "positions"), modules=("pixtral_rope",)),
    grid_axes_swapped=Transform("(column, row) coordinates", _axes_swapped,
                                inputs=("positions",)),
    cls_at_origin=Transform("the CLS token at grid (0, 0)", _cls_at_origin,
                            inputs=("positions",), modules=("llama4_vision_rope",)),
)
