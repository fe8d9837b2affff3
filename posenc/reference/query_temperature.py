"""Query temperature 1 + s·ln(1 + floor(p / F)): Llama 4's NoPE layers (p = cache position + 1)
and Ministral 3 (p = position id); vLLM's Dual Chunk Attention max(1, 1 + s·ln(n / F)) over
the sequence length n = max(cache position) + 1."""

from __future__ import annotations

import math

import numpy as np


def _temperature(p: int, floor_scale: int, scale: float) -> float:
    return 1.0 + scale * math.log(1 + p // floor_scale)


def query_temperature(cache_position, position_ids, *, form, floor_scale, scale):
    cache_position = np.asarray(cache_position, dtype=np.int64)
    if form == "dual_chunk":
        shape = cache_position.shape if position_ids is None else np.shape(position_ids)
        if cache_position.size == 0:
            return np.ones(shape)
        n = int(cache_position.max()) + 1
        return np.full(shape, max(1.0, 1.0 + scale * math.log(n / floor_scale)))
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
