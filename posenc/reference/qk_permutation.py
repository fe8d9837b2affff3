"""q/k weight permutation between the interleaved (Meta, GGUF) and half (transformers) rotary
layouts: rows of each head's rotary slice, one at a time."""

from __future__ import annotations

import numpy as np


def _source_row(k, rotary_dim, to):
    """The row of a rotary slice that lands at row k of the result."""
    half = rotary_dim // 2
    if to == "half":  # result row j*r/2 + i holds original row 2i + j
        j, i = divmod(k, half)
        return 2 * i + j
    i, j = divmod(k, 2)  # to interleaved: result row 2i + j holds original row j*r/2 + i
    return j * half + i


def permute_qk(w, *, n_heads, to, rotary_dim, rope_slice, axis):
    w = np.moveaxis(np.asarray(w, dtype=np.float64), axis, 0)
    head_dim = w.shape[0] // n_heads
    r = head_dim if rotary_dim is None else rotary_dim
    offset = 0 if rope_slice == "first" else head_dim - r
    out = w.copy()
    for h in range(n_heads):
        start = h * head_dim + offset
        for k in range(r):
            out[start + k] = w[start + _source_row(k, r, to)]
    return np.moveaxis(out, 0, axis)
