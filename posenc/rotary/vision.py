"""Shared by the 2-D vision rope variants: rotate x by per-frequency grid coordinates."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import array_api
from ..errors import ParameterError
from . import rotation

# The message of a positions array that is not [seq, 2] (checked with the declared inputs)
GRID_SHAPE = ("positions has shape {shape}: it must be [seq, 2] = {expected} (row, column) "
              "coordinates, one per token of x")


def head_width(x: Any, what: str) -> int:
    """``dim`` of ``x [..., seq, dim]`` (its shape already checked), a multiple of 4."""
    dim = int(x.shape[-1])
    if dim % 4 or dim < 4:
        raise ParameterError(f"x.shape[-1]={dim} must be a positive multiple of 4 ({what} splits each "
                             "half of the head between two axes)")
    return dim


def require_grid(positions: Any) -> None:
    if positions is None:
        raise ParameterError("positions=None: 2-D rope needs [seq, 2] grid coordinates")


def rotate_by_coordinates(xp: Any, x: Any, coords: Any, inv_freq: Sequence[float],
                          axis: Sequence[int], layout: str, device: Any) -> Any:
    """x rotated over its whole width: frequency j by ``coords[s, axis[j]] * inv_freq[j]``;
    ``coords`` [seq, n_axes] in the compute dtype."""
    compute = array_api.compute_dtype(xp, x.dtype)
    index = array_api.asarray(xp, list(axis), device=device)
    per_freq = xp.take(coords, index, axis=1)
    angles = rotation.phases(xp, per_freq, inv_freq, compute=compute, device=device)
    cos, sin = xp.cos(angles), xp.sin(angles)
    head = xp.astype(x, compute, copy=False)
    return xp.astype(rotation.rotate(xp, head, cos, sin, layout), x.dtype, copy=False)
