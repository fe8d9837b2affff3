"""Dual Chunk Attention (Qwen2.5-1M; vLLM's DualChunkRotaryEmbedding): the positions each query
and key is rotated by, from chunk_size and local_size, and the four rotated tensors."""

from __future__ import annotations

import math

import numpy as np


def chunk_positions(positions, chunk_size, local_size, critical):
    """(intra query, successive-chunk query, inter-chunk query, key) positions, int64 arrays of
    the shape of ``positions``; the chunk length is L = chunk_size - local_size."""
    p = np.asarray(positions, dtype=np.int64)
    length = chunk_size - local_size
    within = p % length
    if critical:  # vLLM's *_critical queries: not clamped
        return within, within + length, within + chunk_size, within
    succ = np.minimum(within + length, chunk_size)
    inter = np.full(p.shape, min(2 * length - 1, chunk_size), dtype=np.int64)
    return within, succ, inter, within


def _rotate(x, positions, base, layout, rotary_dim):
    """RoPE of x [..., seq, dim] at integer positions [seq] or [batch, seq], float64, element by
    element: pairs (j, j + r/2) for half, (2j, 2j + 1) for interleaved; the first r features."""
    x = np.asarray(x, dtype=np.float64)
    r = x.shape[-1] if rotary_dim is None else rotary_dim
    out = x.copy()
    for idx in np.ndindex(x.shape[:-1]):
        s = idx[-1]
        m = int(positions[s] if positions.ndim == 1 else positions[idx[0], s])
        for j in range(r // 2):
            theta = base ** (-2.0 * j / r)
            a, b = (j, j + r // 2) if layout == "half" else (2 * j, 2 * j + 1)
            c, sn = math.cos(m * theta), math.sin(m * theta)
            out[(*idx, a)] = x[idx][a] * c - x[idx][b] * sn
            out[(*idx, b)] = x[idx][b] * c + x[idx][a] * sn
    return out


def embed(q, k, chunk, *, base, layout, rotary_dim):
    """(q_intra, q_succ, q_inter, k_embed) for the positions of :func:`chunk_positions`."""
    q_intra, q_succ, q_inter, k_pos = chunk
    return (_rotate(q, q_intra, base, layout, rotary_dim),
            _rotate(q, q_succ, base, layout, rotary_dim),
            _rotate(q, q_inter, base, layout, rotary_dim),
            _rotate(k, k_pos, base, layout, rotary_dim))


def default_positions(q, positions):
    return np.arange(np.asarray(q).shape[-2]) if positions is None else np.asarray(positions)


def dual_chunk_attention(q, k, positions, *, chunk_size, local_size, base, layout, rotary_dim,
                         critical):
    chunk = chunk_positions(default_positions(q, positions), chunk_size, local_size, critical)
    return embed(q, k, chunk, base=base, layout=layout, rotary_dim=rotary_dim)


def angle_bound(q, k, positions, *, chunk_size, local_size, base, layout, rotary_dim, critical):
    chunk = chunk_positions(default_positions(q, positions), chunk_size, local_size, critical)
    return float(max(np.max(c, initial=0) for c in chunk))
