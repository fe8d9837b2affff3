"""Shared by the 2-D vision rope variants: rotate x by per-frequency grid coordinates."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import array_api, rotary
from ..errors import ParameterError


def check_x(x: Any, what: str) -> tuple[int, int]:
    """``(seq, dim)`` of ``x [..., seq, dim]``, dim a multiple of 4."""
    if x.ndim < 2:
        raise ParameterError(f"x must have shape [..., seq, dim], got shape {tuple(x.shape)}")
    seq, dim = int(x.shape[-2]), int(x.shape[-1])
    if dim % 4:
        raise ParameterError(f"x.shape[-1]={dim} must be a multiple of 4 ({what} splits each "
                             "half of the head between two axes)")
    return seq, dim


def check_grid(xp: Any, positions: Any, seq: int) -> None:
    if positions is None:
        raise ParameterError("positions=None: 2-D rope needs [seq, 2] grid coordinates")
    if tuple(positions.shape) != (seq, 2):
        raise ParameterError(f"positions has shape {tuple(positions.shape)}: it must be [seq, 2] "
                             f"= [{seq}, 2] (row, column) coordinates")
    check_integral(xp, positions)


def check_integral(xp: Any, positions: Any) -> None:
    if not xp.isdtype(positions.dtype, "integral"):
        raise ParameterError(f"positions must have an integer dtype, got "
                             f"{array_api.dtype_name(positions.dtype)}")


def rotate_by_coordinates(xp: Any, x: Any, coords: Any, inv_freq: Sequence[float],
                          axis: Sequence[int], layout: str, device: Any) -> Any:
    """x rotated over its whole width: frequency j by ``coords[s, axis[j]] * inv_freq[j]``;
    ``coords`` [seq, n_axes] in the compute dtype."""
    compute = array_api.compute_dtype(xp, x.dtype)
    index = array_api.asarray(xp, list(axis), device=device)
    per_freq = xp.take(coords, index, axis=1)
    angles = rotary.phases(xp, per_freq, inv_freq, compute=compute, device=device)
    cos, sin = xp.cos(angles), xp.sin(angles)
    head = xp.astype(x, compute, copy=False)
    return xp.astype(rotary.rotate(xp, head, cos, sin, layout), x.dtype, copy=False)
