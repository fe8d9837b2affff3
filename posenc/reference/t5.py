"""T5 bucketed relative position bias (Raffel et al. 2020), bucket by bucket in exact arithmetic.

The bucket of a distance ``n >= max_exact`` is ``max_exact + floor(log(n/max_exact) /
log(max_distance/max_exact) * (B - max_exact))`` (``B`` buckets per side), capped at ``B - 1``.
With ``e = B - max_exact`` and ``max_distance > max_exact``, ``k <= e·log(n/m)/log(D/m)`` holds
exactly when ``(D/m)^k <= (n/m)^e``: the floor is the largest such ``k``, found here with
rational numbers, so no logarithm (and no rounding) is ever evaluated.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

import numpy as np


@lru_cache(maxsize=1 << 16)  # the same distances recur on every row (and every call)
def _bucket(relative_position: int, bidirectional: bool, num_buckets: int,
            max_distance: int) -> int:
    """Bucket of one key-minus-query distance."""
    if bidirectional:
        per_side = num_buckets // 2
        offset = per_side if relative_position > 0 else 0  # the key is after the query
        n = abs(relative_position)
    else:
        per_side = num_buckets
        offset = 0
        n = -relative_position if relative_position < 0 else 0  # later keys: bucket 0
    max_exact = per_side // 2
    if n < max_exact:
        return offset + n
    log_buckets = per_side - max_exact
    ratio = Fraction(n, max_exact) ** log_buckets
    base = Fraction(max_distance, max_exact)
    k = 0
    while k + 1 < log_buckets and base ** (k + 1) <= ratio:
        k += 1
    return offset + max_exact + k


def t5_bucket(relative_position, *, bidirectional, num_buckets, max_distance):
    rel = np.asarray(relative_position)
    out = np.empty(rel.shape, dtype=np.int64)
    for idx in np.ndindex(rel.shape):
        out[idx] = _bucket(int(rel[idx]), bidirectional, num_buckets, max_distance)
    return out


def t5_bias(table, *, q_len, k_len, bidirectional, num_buckets, max_distance, query_offset):
    table = np.asarray(table, dtype=np.float64)
    heads = table.shape[1]
    out = np.empty((heads, q_len, k_len), dtype=np.float64)
    for i in range(q_len):
        for j in range(k_len):
            b = _bucket(j - (query_offset + i), bidirectional, num_buckets, max_distance)
            for h in range(heads):
                out[h, i, j] = table[b, h]
    return out
