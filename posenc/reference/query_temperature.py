"""Query temperature 1 + s·ln(1 + floor(p / F)): Llama 4's NoPE layers (p = cache position + 1)
and Ministral 3 (p = position id)."""

from __future__ import annotations

import math

import numpy as np


def _temperature(p: int, floor_scale: int, scale: float) -> float:
    return 1.0 + scale * math.log(1 + p // floor_scale)


def query_temperature(cache_position, position_ids, *, form, floor_scale, scale):
    cache_position = np.asarray(cache_position, dtype=np.int64)
    if form == "llama4":
        row = np.array([_temperature(int(c) + 1, floor_scale, scale) for c in cache_position])
        if position_ids is None:
            return row
        return np.broadcast_to(row, np.shape(position_ids)).copy()  # one row per batch entry
    ids = cache_position if position_ids is None else np.asarray(position_ids, dtype=np.int64)
    out = np.zeros(ids.shape)
    for idx in np.ndindex(ids.shape):
        out[idx] = _temperature(int(ids[idx]), floor_scale, scale)
    return out
