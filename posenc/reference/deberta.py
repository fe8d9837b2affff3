"""DeBERTa disentangled attention, element by element in float64; log buckets in exact integers.

The bucket of a distance ``a = |r| > mid`` is ``mid + ceil(x)`` with
``x = ln(a/mid)/ln((M − 1)/mid)·(mid − 1) > 0``, and for ``x > 0``, ``ceil(x)`` is the number of
integers ``n >= 0`` with ``n < x``. ``x > n`` is equivalent to
``a^(mid−1)·mid^n > (M − 1)^n·mid^(mid−1)`` (both logs of ratios > 0), compared here as Python
integers: no floating-point logarithm anywhere.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np


@lru_cache(maxsize=1 << 16)  # the same distances recur on every row (and every call)
def _ceil_x(a, mid, max_position):
    """``ceil(ln(a/mid)/ln((max_position − 1)/mid)·(mid − 1))`` for an integer ``a > mid``."""
    left = a ** (mid - 1)  # a^(mid−1)·mid^n for n = 0
    right = mid ** (mid - 1)  # (M − 1)^n·mid^(mid−1) for n = 0
    n = 0
    while left > right:  # x > n
        n += 1
        left *= mid
        right *= max_position - 1
    return n


def bucket(r, bucket_size, max_position, clamp):
    """The bucket of one integer distance ``r`` (query − key)."""
    mid = bucket_size // 2
    if clamp == "original":
        r = max(-(max_position - 1), min(max_position - 1, r))
    a = abs(r)
    if a <= mid:
        return r
    magnitude = mid + _ceil_x(a, mid, max_position)
    return magnitude if r > 0 else -magnitude


def deberta_bucket(relative_position, *, bucket_size, max_position, clamp):
    rel = np.asarray(relative_position)
    out = np.zeros(rel.shape, dtype=np.int64)
    for idx in np.ndindex(rel.shape):
        out[idx] = bucket(int(rel[idx]), bucket_size, max_position, clamp)
    return out


def deberta_scores(q, k, rel_k, rel_q, *, position_buckets, max_relative_positions, clamp,
                   scale):
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    tables = [None if t is None else np.asarray(t, np.float64) for t in (rel_k, rel_q)]
    rel_k, rel_q = tables
    present = [t for t in tables if t is not None]
    batch = np.broadcast_shapes(*(a.shape[:-2] for a in (q, k, *present)))
    q_len, k_len, d = q.shape[-2], k.shape[-2], q.shape[-1]
    span = position_buckets if position_buckets > 0 else max_relative_positions
    s = scale if scale is not None else 1.0 / math.sqrt(d * (1 + len(present)))
    q = np.broadcast_to(q, (*batch, q_len, d))
    k = np.broadcast_to(k, (*batch, k_len, d))
    if rel_k is not None:
        rel_k = np.broadcast_to(rel_k, (*batch, 2 * span, d))
    if rel_q is not None:
        rel_q = np.broadcast_to(rel_q, (*batch, 2 * span, d))
    out = np.zeros((*batch, q_len, k_len))
    for idx in np.ndindex(*batch):
        for i in range(q_len):
            for j in range(k_len):
                r = i - j  # query position − key position, both counted from 0
                if position_buckets > 0:
                    r = bucket(r, position_buckets, max_relative_positions, clamp)
                row = min(max(r + span, 0), 2 * span - 1)
                terms = [q[idx][i] * k[idx][j]]
                if rel_k is not None:  # content -> position
                    terms.append(q[idx][i] * rel_k[idx][row])
                if rel_q is not None:  # position -> content, the same row as c2p
                    terms.append(k[idx][j] * rel_q[idx][row])
                out[idx][i, j] = math.fsum(np.concatenate(terms)) * s
    return out
