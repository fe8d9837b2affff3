"""Sinusoidal table (Vaswani et al. 2017) in its three real-world layouts."""

from __future__ import annotations

import math

import numpy as np


def _frequencies(dim: int, base: float, layout: str) -> list[float]:
    if layout == "t2t":
        half = dim // 2
        return [math.exp(-i * math.log(base) / max(half - 1, 1)) for i in range(half)]
    return [base ** (-2.0 * i / dim) for i in range((dim + 1) // 2)]


def _row(k: float, dim: int, base: float, layout: str) -> list[float]:
    freqs = _frequencies(dim, base, layout)
    if layout == "interleaved":  # column 2i: sin, column 2i+1: cos, of the same angle
        return [math.sin(k * freqs[c // 2]) if c % 2 == 0 else math.cos(k * freqs[c // 2])
                for c in range(dim)]
    if layout == "concat":  # odd dim: the sin half is one longer
        n_cos = dim // 2
        return [math.sin(k * w) for w in freqs] + [math.cos(k * w) for w in freqs[:n_cos]]
    if layout == "t2t":  # odd dim: a zero column at the end
        row = [math.sin(k * w) for w in freqs] + [math.cos(k * w) for w in freqs]
        return row + [0.0] * (dim - len(row))
    raise ValueError(f"layout={layout!r}")


def sinusoidal(positions, dim, *, base, layout, padding_idx):
    positions = np.asarray(positions)
    out = np.zeros((*positions.shape, dim), dtype=np.float64)
    for idx in np.ndindex(positions.shape):
        k = positions[idx]
        if padding_idx is not None and k == padding_idx:
            continue  # fairseq: the padding row is all zeros
        out[idx] = _row(float(k), dim, base, layout)
    return out


def angle_bound(positions, dim, *, base, layout, padding_idx):
    return float(np.max(np.abs(positions), initial=0))  # the fastest frequency is 1
