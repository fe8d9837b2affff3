"""Llama 4 vision rope: pairs (2j, 2j+1), the first d/4 by (column + 1)·base^(-4j/d), the next
d/4 by (row + 1)·base^(-4j/d); a token with a negative coordinate (CLS) is not rotated."""

from __future__ import annotations

import math

import numpy as np


def llama4_vision_rope(x, positions, *, base):
    x = np.asarray(x, dtype=np.float64)
    positions = np.asarray(positions)
    d = x.shape[-1]
    out = x.copy()
    for idx in np.ndindex(x.shape[:-1]):
        row, col = (int(v) for v in positions[idx[-1]])
        if row < 0 or col < 0:
            continue  # the CLS token: angle zero
        for j in range(d // 2):
            coordinate = col + 1 if j < d // 4 else row + 1
            angle = coordinate * base ** (-4.0 * (j % (d // 4)) / d)
            c, s = math.cos(angle), math.sin(angle)
            a, b = x[idx][2 * j], x[idx][2 * j + 1]
            out[(*idx, 2 * j)] = a * c - b * s
            out[(*idx, 2 * j + 1)] = b * c + a * s
    return out


def angle_bound(x, positions, *, base):
    return float(np.max(np.abs(np.asarray(positions)), initial=0)) + 1.0
