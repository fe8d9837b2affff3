"""Rotary position embedding (Su et al., RoFormer): rotate feature pairs by position * theta_i."""

from __future__ import annotations

import math

import numpy as np


def _pairs(rotary_dim: int, layout: str) -> list[tuple[int, int]]:
    half = rotary_dim // 2
    if layout == "interleaved":  # RoFormer, GPT-J, Meta Llama: (2i, 2i+1)
        return [(2 * i, 2 * i + 1) for i in range(half)]
    if layout == "half":  # GPT-NeoX, transformers Llama: (i, i + d/2)
        return [(i, i + half) for i in range(half)]
    raise ValueError(f"layout={layout!r}")


def rope(x, positions, *, base, layout, rotary_dim):
    x = np.asarray(x, dtype=np.float64)
    seq, dim = x.shape[-2], x.shape[-1]
    rd = dim if rotary_dim is None else rotary_dim
    positions = np.arange(seq) if positions is None else np.asarray(positions)
    thetas = [base ** (-2.0 * i / rd) for i in range(rd // 2)]
    out = x.copy()
    for idx in np.ndindex(x.shape[:-1]):
        s = idx[-1]
        m = positions[s] if positions.ndim == 1 else positions[idx[0], s]
        for i, (a, b) in enumerate(_pairs(rd, layout)):
            c, sn = math.cos(m * thetas[i]), math.sin(m * thetas[i])
            xa, xb = x[idx][a], x[idx][b]
            out[(*idx, a)] = xa * c - xb * sn
            out[(*idx, b)] = xb * c + xa * sn
    return out


def angle_bound(x, positions, *, base, layout, rotary_dim):
    seq = np.asarray(x).shape[-2]
    pos = np.arange(seq) if positions is None else np.asarray(positions)
    return float(np.max(np.abs(pos), initial=0))  # theta_0 = 1
