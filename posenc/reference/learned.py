"""Learned absolute table lookup (BERT, GPT-2): row ``positions[...]`` of ``table``."""

from __future__ import annotations

import numpy as np


def learned(positions, table, *, out_of_range):
    positions = np.asarray(positions)
    table = np.asarray(table, dtype=np.float64)
    max_len = table.shape[0]
    out = np.empty((*positions.shape, table.shape[1]), dtype=np.float64)
    for idx in np.ndindex(positions.shape):
        k = int(positions[idx])
        if not 0 <= k < max_len:
            if out_of_range == "error":
                raise IndexError(f"position {k} outside [0, {max_len})")
            k = min(max(k, 0), max_len - 1)
        out[idx] = table[k]
    return out
