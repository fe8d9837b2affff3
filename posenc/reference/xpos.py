"""xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer"): RoPE whose rotated pairs are
scaled by zeta_i ** (+(n - c) / scale_base) on queries and ** (-(n - c) / scale_base) on keys."""

from __future__ import annotations

import math

import numpy as np


def _pairs(rotary_dim: int, layout: str) -> list[tuple[int, int]]:
    half = rotary_dim // 2
    if layout == "interleaved":  # torchscale XPOS, rotary-embedding-torch: (2i, 2i+1)
        return [(2 * i, 2 * i + 1) for i in range(half)]
    if layout == "half":  # (i, i + r/2)
        return [(i, i + half) for i in range(half)]
    raise ValueError(f"layout={layout!r}")


def xpos(x, positions, *, kind, scale_base, centre, base, layout, rotary_dim):
    x = np.asarray(x, dtype=np.float64)
    seq, dim = x.shape[-2], x.shape[-1]
    rd = dim if rotary_dim is None else rotary_dim
    positions = np.arange(seq) if positions is None else np.asarray(positions)
    sign = {"query": 1.0, "key": -1.0}[kind]
    thetas = [base ** (-2.0 * i / rd) for i in range(rd // 2)]
    zetas = [(2.0 * i / rd + 0.4) / 1.4 for i in range(rd // 2)]
    out = x.copy()
    for idx in np.ndindex(x.shape[:-1]):
        s = idx[-1]
        n = float(positions[s] if positions.ndim == 1 else positions[idx[0], s])
        power = sign * (n - centre) / scale_base
        for i, (a, b) in enumerate(_pairs(rd, layout)):
            c, sn = math.cos(n * thetas[i]), math.sin(n * thetas[i])
            factor = zetas[i] ** power
            xa, xb = x[idx][a], x[idx][b]
            out[(*idx, a)] = factor * (xa * c - xb * sn)
            out[(*idx, b)] = factor * (xb * c + xa * sn)
    return out


def angle_bound(x, positions, *, kind, scale_base, centre, base, layout, rotary_dim):
    seq = np.asarray(x).shape[-2]
    pos = np.arange(seq) if positions is None else np.asarray(positions)
    return float(np.max(np.abs(pos), initial=0))  # theta_0 = 1
