"""FoPE, Fourier Position Embedding (Hua et al. 2024; vLLM's FourierRotaryEmbedding): each
rotated pair's cos and sin are Fourier series over the kept RoPE frequencies, with per-head
coefficient matrices; frequencies at or below the floor 2π/L are clipped to zero."""

from __future__ import annotations

import math

import numpy as np


def kept_frequencies(dim, base, max_position_embeddings, num_inv_freq):
    """The frequencies FoPE keeps: the first num_inv_freq of base^(-2i/dim), or those above
    2π / max_position_embeddings (a period shorter than the training length)."""
    inv = [base ** (-2.0 * i / dim) for i in range(dim // 2)]
    if num_inv_freq is not None:
        return inv[:num_inv_freq]
    return [w for w in inv if w > 2.0 * math.pi / max_position_embeddings]


def _coefficient_head(coef, head, heads):
    """The [M, M] matrix of query/key head ``head`` of ``heads``: shared ([M, M]) or its
    kv head's (``[kv, M, M]``, heads grouped contiguously)."""
    if coef.ndim == 2:
        return coef
    return coef[head // (heads // coef.shape[0])]


def fope(x, cos_coef, sin_coef, positions, *, base, max_position_embeddings, num_inv_freq,
         rotary_dim):
    x = np.asarray(x, dtype=np.float64)
    cos_coef = np.asarray(cos_coef, dtype=np.float64)
    sin_coef = np.asarray(sin_coef, dtype=np.float64)
    dim, seq = x.shape[-1], x.shape[-2]
    half = dim // 2
    positions = np.arange(seq) if positions is None else np.asarray(positions)
    # rotary_dim sets the ladder only (vLLM); the pairs stay (j, j + dim/2) over the head
    omega = kept_frequencies(rotary_dim or dim, base, max_position_embeddings, num_inv_freq)
    kept = len(omega)
    has_heads = x.ndim >= (4 if positions.ndim == 2 else 3)  # [batch, seq, dim]: no heads
    heads = x.shape[-3] if has_heads else 1
    out = x.copy()
    for idx in np.ndindex(x.shape[:-1]):
        s = idx[-1]
        head = idx[-2] if has_heads else 0
        m = int(positions[s] if positions.ndim == 1 else positions[idx[0], s])
        a = _coefficient_head(cos_coef, head, heads)
        b = _coefficient_head(sin_coef, head, heads)
        for j in range(half):
            if j < kept:
                c = sum(math.cos(m * omega[i]) * a[i, j] for i in range(kept))
                sn = sum(math.sin(m * omega[i]) * b[i, j] for i in range(kept))
            else:  # a clipped frequency: zero, cos 1 and sin 0
                c, sn = 1.0, 0.0
            out[(*idx, j)] = x[idx][j] * c - x[idx][j + half] * sn
            out[(*idx, j + half)] = x[idx][j + half] * c + x[idx][j] * sn
    return out


def angle_bound(x, cos_coef, sin_coef, positions, *, base, max_position_embeddings,
                num_inv_freq, rotary_dim=None):
    pos = np.arange(np.asarray(x).shape[-2]) if positions is None else np.asarray(positions)
    return float(np.max(np.abs(pos), initial=0))
