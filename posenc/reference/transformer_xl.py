"""Transformer-XL / XLNet relative attention scores, entry by entry, in float64.

Each score is the formula written out: query row r sits at absolute position k_len - q_len + r,
key j at j, and R_t is the [sin | cos] row of distance t = (k_len - q_len + r) - j.
"""

from __future__ import annotations

import math

import numpy as np


def relative_row(t: int, d_model: int, base: float) -> np.ndarray:
    """Transformer-XL's PositionalEmbedding row: [sin(t w_0) .. | cos(t w_0) ..], w_i = base^(-2i/d)."""
    freqs = [base ** (-2.0 * i / d_model) for i in range(d_model // 2)]
    return np.array([math.sin(t * w) for w in freqs] + [math.cos(t * w) for w in freqs])


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    return math.fsum(float(x) * float(y) for x, y in zip(a, b, strict=True))


def transformer_xl(q, k, r_proj, content_bias, position_bias, *, causal, method, base, scale):
    del method  # rel_shift and gather are two ways to compute the same numbers
    q, k, r_proj, u, v = (np.asarray(a, dtype=np.float64)
                          for a in (q, k, r_proj, content_bias, position_bias))
    q_len, k_len, d = q.shape[-2], k.shape[-2], q.shape[-1]
    d_model = r_proj.shape[-2]
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], r_proj.shape[:-2], u.shape[:-1],
                                v.shape[:-1])
    q = np.broadcast_to(q, (*batch, q_len, d))
    k = np.broadcast_to(k, (*batch, k_len, d))
    r_proj = np.broadcast_to(r_proj, (*batch, d_model, d))
    u = np.broadcast_to(u, (*batch, d))
    v = np.broadcast_to(v, (*batch, d))
    s = 1.0 / math.sqrt(d) if scale is None else scale
    out = np.empty((*batch, q_len, k_len))
    for idx in np.ndindex(*batch):
        for r in range(q_len):
            i = k_len - q_len + r  # the query's absolute position
            for j in range(k_len):
                if causal and j > i:
                    out[idx][r, j] = -math.inf
                    continue
                rel = relative_row(i - j, d_model, base)
                projected = [_dot(rel, r_proj[idx][:, c]) for c in range(d)]  # R_{i-j} W_R
                content = _dot(q[idx][r] + u[idx], k[idx][j])
                position = _dot(q[idx][r] + v[idx], np.array(projected))
                out[idx][r, j] = (content + position) * s
    return out


def angle_bound(q, k, r_proj, content_bias, position_bias, *, causal, method, base, scale):
    """The largest |angle|: the largest |distance| times the fastest frequency, 1."""
    q_len, k_len = np.shape(q)[-2], np.shape(k)[-2]
    return float(max(k_len - 1, 0 if causal else q_len - 1))
