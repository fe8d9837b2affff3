"""Rotary position embedding (Su et al., RoFormer): rotate feature pairs by position * theta_i,
with the frequencies of a transformers rope_scaling schedule."""

from __future__ import annotations

import math

import numpy as np

from ..errors import ParameterError
from ..rotary.schedules import frequencies, kind, rotary_width


def _pairs(rotary_dim: int, layout: str) -> list[tuple[int, int]]:
    half = rotary_dim // 2
    if layout == "interleaved":  # RoFormer, GPT-J, Meta Llama: (2i, 2i+1)
        return [(2 * i, 2 * i + 1) for i in range(half)]
    if layout == "half":  # GPT-NeoX, transformers Llama: (i, i + d/2)
        return [(i, i + half) for i in range(half)]
    raise ValueError(f"layout={layout!r}")


def _schedule(x, positions, rotary_dim, base, scaling, seq_len):
    seq, dim = x.shape[-2], x.shape[-1]
    rd = rotary_dim if rotary_dim is not None else rotary_width(dim, scaling)
    if seq_len is None and kind(scaling) in ("dynamic", "longrope"):
        # the length of x; with explicit positions longrope looks at the largest one
        seq_len = seq if positions is None else int(np.max(positions)) + 1
    thetas, attention = frequencies(rd, base, scaling, seq_len)
    return rd, thetas, attention


def _positions(x, positions):
    """``positions`` as an array of one position per row of x: ``[seq]``, or ``[batch, seq]``
    with x ``[batch, ..., seq, dim]``; arange(seq) when omitted."""
    seq = x.shape[-2]
    if positions is None:
        return np.arange(seq)
    positions = np.asarray(positions)
    if positions.ndim == 1 and positions.shape[0] == seq:
        return positions
    if positions.ndim == 2 and x.ndim >= 3 and positions.shape == (x.shape[0], seq):
        return positions
    length = positions.shape[-1] if positions.ndim else None
    raise ParameterError(
        f"positions has length {length} (shape {positions.shape}) but x has seq = {seq} (shape "
        f"{x.shape}): positions must be [seq] = [{seq}] or [batch, seq] = [{x.shape[0]}, {seq}] "
        "(batched needs x of rank 3 or more)")


def rope(x, positions, *, base, layout, rotary_dim, scaling, seq_len):
    x = np.asarray(x, dtype=np.float64)
    positions = None if positions is None else _positions(x, positions)
    rd, thetas, attention = _schedule(x, positions, rotary_dim, base, scaling, seq_len)
    positions = _positions(x, positions)
    a, b = (list(side) for side in zip(*_pairs(rd, layout), strict=True))
    # each position's cos and sin once, each entry math.cos/math.sin of the exact float64
    # angle m·theta_i (a row of x then rotates with elementwise float64 products: the same
    # numbers as pair by pair)
    values, rows = np.unique(positions, return_inverse=True)
    cos = np.empty((len(values), len(a)))
    sin = np.empty((len(values), len(a)))
    for u, m in enumerate(values.astype(np.float64).tolist()):
        for i in range(len(a)):
            cos[u, i] = math.cos(m * thetas[i]) * attention
            sin[u, i] = math.sin(m * thetas[i]) * attention
    cos, sin = cos[rows.reshape(positions.shape)], sin[rows.reshape(positions.shape)]
    if positions.ndim == 2:  # [batch, seq, pairs] lines up with x[b, ..., s, :]
        cos, sin = (t.reshape(t.shape[0], *([1] * (x.ndim - 3)), *t.shape[1:]) for t in (cos, sin))
    out = x.copy()
    xa, xb = x[..., a], x[..., b]
    out[..., a] = xa * cos - xb * sin
    out[..., b] = xb * cos + xa * sin
    return out


def angle_bound(x, positions, *, base, layout, rotary_dim, scaling, seq_len):
    seq = np.asarray(x).shape[-2]
    pos = np.arange(seq) if positions is None else np.asarray(positions)
    return float(np.max(np.abs(pos), initial=0))  # every schedule keeps theta_i <= 1
