"""Llama 4's vision rope: a 2-D rope over 1-based patch coordinates, the column's frequencies
first, interleaved pairs, and the CLS token left unrotated."""

from __future__ import annotations

from typing import Any

from .. import array_api, params, validation
from ..rotary import rotation, vision

__all__ = ["llama4_vision_rope"]

_INPUTS = validation.Inputs("llama4_vision_rope",
                            messages={"shape:positions": vision.GRID_SHAPE})


def llama4_vision_rope(x: Any, positions: Any, *, base: float = 10000.0,
                       layout: str = "interleaved") -> Any:
    """Rotate ``x`` (``[..., seq, dim]``, dim a multiple of 4) by patch coordinates.

    ``positions``: ``[seq, 2]`` 0-based (row, column); a token with a negative coordinate is
    the CLS token (transformers' ID_CLS_TOKEN = -2) and is not rotated. Pairs ``(2j, 2j+1)``
    (``layout="interleaved"``; ``"half"``: ``(j, j + d/2)``): the first d/4 rotate by
    ``(column + 1)·base^(-4j/d)``, the next d/4 by ``(row + 1)·base^(-4j/d)`` (transformers
    Llama4VisionRotaryEmbedding). Unlike
    :func:`axial_rope`, the patch at (0, 0) is rotated (coordinates count from 1)."""
    xp = array_api.namespace(x=x, positions=positions)
    base = params.base(base)
    params.choice("layout", layout, rotation.LAYOUTS)
    device, positions = rotation.array_inputs(xp, x, positions)
    vision.require_grid(positions)
    _INPUTS.check(xp, x=x, positions=positions)
    dim = vision.head_width(x, "llama4_vision_rope")
    compute = array_api.compute_dtype(xp, x.dtype)
    array_api.assert_position_range(xp, positions, compute=compute)
    cls = xp.any(positions < 0, axis=1, keepdims=True)
    one_based = xp.where(cls, xp.zeros_like(positions), positions + 1)
    coords = xp.astype(xp.stack([one_based[:, 1], one_based[:, 0]], axis=1), compute)
    theta = [base ** (-4.0 * j / dim) for j in range(dim // 4)]
    axis = (0,) * (dim // 4) + (1,) * (dim // 4)  # column first
    return vision.rotate_by_coordinates(xp, x, coords, theta + theta, axis, layout, device)
