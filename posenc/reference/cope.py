"""CoPE (Golovneva et al. 2024): gated, content-dependent positions ``p_ij = Σ_{t=j..i} g_it``
with ``g_it = sigmoid(scale · q_i·k_t)``, and the positional logit ``q_i · E[p_ij]``
interpolated linearly between the integer rows of ``E``.

Written for clarity, one (query, key) pair at a time. The keyword-only knobs of
:func:`cope_variant` past ``causal`` are the known porting bugs the spec's diagnoses evaluate.
"""

from __future__ import annotations

import math

import numpy as np


def cope(q, k, pos_emb, key_mask=None, *, npos_max, scale, causal):
    return cope_variant(q, k, pos_emb, npos_max=npos_max, scale=scale, causal=causal,
                        key_mask=key_mask)


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def cope_variant(q, k, pos_emb, *, npos_max, scale, causal, key_mask=None, count="to_query",
                 clamp=True, swap_weights=False):
    """``count``: ``"to_query"`` sums the gates of keys j..i (the spec); ``"from_start"`` sums
    keys 0..j (a forward cumulative sum). ``clamp=False`` reads rows at or beyond ``npos_max``
    as 0 (a gather that fills out-of-range indices with zeros). ``swap_weights`` gives the
    weight ``p - floor(p)`` to the floor row instead of the ceiling row. ``key_mask``
    ``[batch, k_len]`` (True = a real key; batch the first leading dim): a padded key's gate
    is 0 and its term 0."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    table = np.asarray(pos_emb, dtype=np.float64)
    if q.ndim < 2 or k.ndim < 2 or table.ndim != 2:
        raise ValueError(f"q {q.shape}, k {k.shape}, pos_emb {table.shape}")
    d = q.shape[-1]
    if k.shape[-1] != d or table.shape != (npos_max, d) or npos_max < 1:
        raise ValueError(f"q {q.shape}, k {k.shape}, pos_emb {table.shape}, npos_max={npos_max}")
    q_len, k_len = q.shape[-2], k.shape[-2]
    if q_len > k_len:
        raise ValueError(f"q_len={q_len} > k_len={k_len}")
    s = 1.0 / math.sqrt(d) if scale is None else float(scale)
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    qb = np.broadcast_to(q, (*batch, q_len, d))
    kb = np.broadcast_to(k, (*batch, k_len, d))
    out = np.zeros((*batch, q_len, k_len), dtype=np.float64)
    keep = None if key_mask is None else np.asarray(key_mask, dtype=bool)
    for b in np.ndindex(*batch):
        real = (np.ones(k_len, bool) if keep is None
                else keep[(b[0] if batch and keep.shape[0] > 1 else 0)])
        for r in range(q_len):
            i = k_len - q_len + r  # queries are the last q_len positions (KV cache)
            last = i if causal else k_len - 1  # the last key the query sees
            gates = [_sigmoid(s * float(qb[b][r] @ kb[b][t])) if real[t] else 0.0
                     for t in range(k_len)]
            logits = table @ qb[b][r]  # q_i · E[n] for n = 0 .. npos_max - 1

            def row(n: int) -> float:
                return float(logits[n]) if n < npos_max else 0.0  # noqa: B023

            for j in range(last + 1):
                if not real[j]:
                    continue  # a padded key: no gate, no term
                if count == "to_query":
                    p = math.fsum(gates[j:last + 1])
                elif count == "from_start":
                    p = math.fsum(gates[:j + 1])
                else:
                    raise ValueError(f"count={count!r}")
                if clamp:
                    p = min(p, npos_max - 1)
                low, high = math.floor(p), math.ceil(p)
                w = p - low
                if swap_weights:
                    out[(*b, r, j)] = w * row(low) + (1 - w) * row(high)
                else:
                    out[(*b, r, j)] = w * row(high) + (1 - w) * row(low)
    return out
