"""Llama 4 vision rope: pairs (2j, 2j+1) (interleaved; half: (j, j + d/2)), the first d/4 by
(column + 1)·base^(-4j/d), the next d/4 by (row + 1)·base^(-4j/d); a token with a negative
coordinate (CLS) is not rotated."""

from __future__ import annotations

import math

import numpy as np


def llama4_vision_rope(x, positions, *, base, layout):
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
            first, second = (2 * j, 2 * j + 1) if layout == "interleaved" else (j, j + d // 2)
            a, b = x[idx][first], x[idx][second]
            out[(*idx, first)] = a * c - b * s
            out[(*idx, second)] = b * c + a * s
    return out


def angle_bound(x, positions, *, base, layout):
    return float(np.max(np.abs(np.asarray(positions)), initial=0)) + 1.0
