"""Rotary position embedding: rotate feature pairs of ``x`` by ``position * theta_i``."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _params, _xp
from ..errors import ParameterError

__all__ = ["rope"]

LAYOUTS = ("half", "interleaved")


def inverse_frequencies(rotary_dim: int, base: float) -> np.ndarray:
    """``theta_i = base^(-2i/rotary_dim)`` in float64, host side (static parameters only)."""
    return base ** (-2.0 * np.arange(rotary_dim // 2) / rotary_dim)


def _check_shapes(x: Any, positions: Any) -> tuple[int, int]:
    if x.ndim < 2:
        raise ParameterError(f"x must have shape [..., seq, dim], got shape {tuple(x.shape)}")
    seq, dim = int(x.shape[-2]), int(x.shape[-1])
    if positions is None:
        return seq, dim
    pshape = tuple(positions.shape)
    if positions.ndim == 1 and pshape[0] == seq:
        return seq, dim
    if positions.ndim == 2 and x.ndim >= 3 and pshape == (int(x.shape[0]), seq):
        return seq, dim
    raise ParameterError(
        f"positions has shape {pshape} but x has shape {tuple(x.shape)}: positions must be "
        f"[seq] = [{seq}] or [batch, seq] = [{x.shape[0]}, {seq}] (batched needs x.ndim >= 3)")


def rope(
    x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
    rotary_dim: int | None = None,
) -> Any:
    """Rotate ``x`` (``[..., seq, dim]``) by its positions; same shape and dtype as ``x``.

    ``positions``: ``[seq]`` or batched ``[batch, seq]`` (left padding; applies to
    ``x[b, ..., s, :]``), integers or float32/float64; default ``arange(seq)``.
    ``layout``: ``"half"`` pairs ``(i, i + r/2)`` (GPT-NeoX, transformers Llama),
    ``"interleaved"`` pairs ``(2i, 2i + 1)`` (RoFormer, GPT-J, Meta Llama).
    ``rotary_dim`` (even, ≤ dim) rotates the first features only; the rest pass through
    unchanged. Angles and the rotation run in float32 (float64 for float64 ``x``).
    """
    xp = _xp.namespace(x=x, positions=positions)
    _params.choice("layout", layout, LAYOUTS)
    base = _params.base(base)
    if not hasattr(x, "dtype"):
        raise ParameterError(f"x must be an array, got {type(x).__name__}")
    _xp.check_floating(xp, "x", x)
    device = _xp.device_of(x)
    if positions is not None and not hasattr(positions, "dtype"):
        positions = _xp.asarray(xp, positions, device=device)
    seq, dim = _check_shapes(x, positions)
    if rotary_dim is None:
        if dim % 2:
            raise ParameterError(
                f"x.shape[-1]={dim} is odd: rotary embedding rotates pairs of features; "
                "pass an even rotary_dim to rotate only part of them")
        rd = dim
    else:
        rd = _params.integer("rotary_dim", rotary_dim, minimum=2)
        if rd % 2:
            raise ParameterError(f"rotary_dim={rd} must be even")
        if rd > dim:
            raise ParameterError(f"rotary_dim={rd} exceeds x.shape[-1]={dim}")
    compute = _xp.compute_dtype(xp, x.dtype)
    if positions is None:
        positions = xp.arange(seq, device=device) if device is not None else xp.arange(seq)
    else:
        _xp.check_positions_dtype(xp, positions)
        _xp.check_position_range(xp, positions, compute=compute)

    theta = _xp.asarray(xp, inverse_frequencies(rd, base), dtype=compute, device=device)
    angles = xp.astype(positions, compute)[..., None] * theta  # [seq, rd/2] or [b, seq, rd/2]
    if positions.ndim == 2:  # line batch up with x[b, ..., s, :]
        angles = xp.reshape(angles, (angles.shape[0], *([1] * (x.ndim - 3)), seq, rd // 2))
    cos, sin = xp.cos(angles), xp.sin(angles)

    head = xp.astype(x[..., :rd], compute, copy=False)
    if layout == "half":
        a, b = head[..., : rd // 2], head[..., rd // 2 :]
        rotated = xp.concat([a * cos - b * sin, b * cos + a * sin], axis=-1)
    else:
        pairs = xp.reshape(head, (*tuple(x.shape[:-1]), rd // 2, 2))
        a, b = pairs[..., 0], pairs[..., 1]
        rotated = xp.reshape(xp.stack([a * cos - b * sin, b * cos + a * sin], axis=-1),
                             (*tuple(x.shape[:-1]), rd))
    rotated = xp.astype(rotated, x.dtype, copy=False)
    if rd == dim:
        return rotated
    return xp.concat([rotated, x[..., rd:]], axis=-1)
