"""Pixtral 2-D rope: theta_k = base^(-2k/d); rows rotate by theta_{2i}, columns by theta_{2i+1};
frequency j pairs features (j, j + d/2) (half) or (2j, 2j+1) (interleaved), the d/4 row
frequencies first."""

from __future__ import annotations

import math

import numpy as np


def pixtral_rope(x, positions, *, base, max_width, layout):
    x = np.asarray(x, dtype=np.float64)
    positions = np.asarray(positions)
    if positions.ndim == 1:  # flat ids row * max_width + column
        positions = np.stack([positions // max_width, positions % max_width], axis=1)
    d = x.shape[-1]
    ladder = [base ** (-2.0 * k / d) for k in range(d // 2)]
    freqs = [(0, ladder[2 * i]) for i in range(d // 4)] + [(1, ladder[2 * i + 1])
                                                          for i in range(d // 4)]
    out = x.copy()
    for idx in np.ndindex(x.shape[:-1]):
        row_col = positions[idx[-1]]
        for j, (axis, theta) in enumerate(freqs):
            angle = float(row_col[axis]) * theta
            c, s = math.cos(angle), math.sin(angle)
            first, second = (j, j + d // 2) if layout == "half" else (2 * j, 2 * j + 1)
            a, b = x[idx][first], x[idx][second]
            out[(*idx, first)] = a * c - b * s
            out[(*idx, second)] = b * c + a * s
    return out


def angle_bound(x, positions, *, base, max_width, layout):
    positions = np.asarray(positions)
    if positions.ndim == 1:
        positions = np.stack([positions // max_width, positions % max_width], axis=1)
    return float(np.max(np.abs(positions), initial=0))
