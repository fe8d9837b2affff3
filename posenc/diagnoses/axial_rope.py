"""Transforms of axial rope (``axial_rope``): the coordinate axes swapped (row read as column),
the rotary widths assigned to the axes in reverse order."""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import Arrays, Reference, Transform, call, register


def _coordinates_reversed(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    """Each axis' block of frequencies driven by the mirrored axis' coordinate (negative
    coordinates are real ones here, unlike a vision CLS marker)."""
    positions = np.asarray(inputs["positions"])
    return call(ref, {**inputs, "positions": positions[..., ::-1]}, params)


def _widths_reversed(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    widths = params.get("axes_dims")
    if not widths:  # the even split reads the same either way
        return call(ref, inputs, params)
    return call(ref, inputs, {**params, "axes_dims": list(widths)[::-1]})


register(
    axial_coordinates_reversed=Transform("the coordinate axes in reverse order",
                                         _coordinates_reversed, inputs=("positions",),
                                         modules=("axial_rope",)),
    axial_widths_reversed=Transform("axes_dims in reverse order", _widths_reversed,
                                    params=("axes_dims",), modules=("axial_rope",)),
)
