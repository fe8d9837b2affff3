"""T5 relative position bias: distances (key − query) bucketed, then a per-head table lookup.

The bucket is defined with a real logarithm that lands exactly on an integer at some distances
(16, 32 and 64 with T5's defaults), so a float32 ``log`` that is one ulp low silently drops a
bucket. Here no logarithm runs on the device: the first distance of every bucket is an
integer computed once on the host from the static parameters, with exact integer arithmetic,
and distances are bucketed by ``searchsorted`` against those integers — exact in every dtype,
backend and mode.
"""

from __future__ import annotations

import math
import operator
from typing import Any

from .. import array_api, native, params, validation
from ..errors import ParameterError
from ..layers import Layer, Weight, normal

__all__ = ["t5_bias", "t5_bucket"]

# query_offset + q_len + k_len must stay within int32 (JAX without x64 has no wider integer)
INDEX_LIMIT = 2**31 - 1

_BIAS_INPUTS = validation.Inputs("t5_bias", messages={
    "shape:table": "table must have shape [num_buckets, heads] = [{size_of[num_buckets]}, heads], "
                   "got shape {shape}"})


def _config(bidirectional: Any, num_buckets: Any, max_distance: Any) -> tuple[bool, int, int]:
    """Validated ``(bidirectional, buckets_per_side, max_distance)``."""
    bidirectional = params.flag("bidirectional", bidirectional)
    num_buckets = params.size("num_buckets", num_buckets, minimum=None)
    if bidirectional and num_buckets % 2:
        raise ParameterError(
            f"num_buckets={num_buckets} must be even when bidirectional=True (half the buckets "
            "for keys before the query, half for keys after it)")
    minimum = 4 if bidirectional else 2  # max_exact = per_side // 2 must be >= 1
    if num_buckets < minimum:
        raise ParameterError(
            f"num_buckets={num_buckets} must be >= {minimum} when bidirectional={bidirectional} "
            "(max_exact, half the buckets of a side, must be >= 1)")
    per_side = num_buckets // 2 if bidirectional else num_buckets
    max_distance = params.size("max_distance", max_distance, minimum=None)
    max_exact = per_side // 2
    if max_distance <= max_exact:
        raise ParameterError(
            f"max_distance={max_distance} must be > max_exact={max_exact} (num_buckets="
            f"{num_buckets}, bidirectional={bidirectional}): the logarithmic buckets span "
            "max_exact..max_distance")
    # operator.index makes torch.compile specialise these sizes (plain int() leaves them
    # symbolic once a recompile has seen other values, and the exact thresholds below then
    # become sympy expressions with huge powers)
    return bidirectional, operator.index(per_side), operator.index(max_distance)


def bucket_starts(per_side: int, max_distance: int) -> tuple[int, ...]:
    """The smallest distance ``n`` of each bucket ``1 .. per_side - 1`` of one side.

    Buckets ``1 .. m`` (``m = max_exact``) start at ``n = 1 .. m``. Bucket ``m + k`` starts at
    the smallest integer ``n`` with ``k <= e·ln(n/m)/ln(D/m)`` (``e = per_side - m``), i.e.
    ``n^e · m^k >= D^k · m^e``: a float64 estimate, corrected with exact integer comparisons.
    Not cached: microseconds for T5's sizes, and torch.compile warns about functools caches.
    """
    m = per_side // 2
    e = per_side - m
    starts = list(range(1, m + 1))
    for k in range(1, e):
        def reaches(n: int, k: int = k) -> bool:
            return n**e * m**k >= max_distance**k * m**e

        n = max(m, math.ceil(m * (max_distance / m) ** (k / e)))
        while not reaches(n):
            n += 1
        while n > m and reaches(n - 1):
            n -= 1
        starts.append(n)
    return tuple(starts)


def _buckets(xp: Any, rel: Any, bidirectional: bool, per_side: int, max_distance: int,
             device: Any, *, bounded: bool = False) -> Any:
    """Buckets of the integer array ``rel``, in the default integer dtype of ``searchsorted``.

    Exact for every value of every signed dtype: ``n = |rel|`` (and ``−rel``) overflows at the
    dtype's minimum, so distances are compared as ``n − 1``, which always fits, against the
    bucket starts minus one. ``bounded``: the caller guarantees ``|rel| <= 2**31 − 1`` in a
    dtype of at least 32 bits (t5_bias checks its lengths), so ``n`` is computed directly,
    in fewer operations.
    """
    rel = array_api.at_least_int32(xp, rel)  # int8/int16: searchsorted in a dtype every backend takes
    starts = bucket_starts(per_side, max_distance)
    shift = 0 if bounded else 1
    limit = int(xp.iinfo(rel.dtype).max)
    # n − shift <= limit; a start beyond (int32 with a huge max_distance) is never reached
    starts_array = array_api.asarray(xp, [s - shift for s in starts if s - shift <= limit],
                               dtype=rel.dtype, device=device)
    if bounded:
        n = xp.abs(rel) if bidirectional else xp.where(rel < 0, -rel, xp.zeros_like(rel))
    else:
        before = rel < 0
        minus_one = xp.full_like(rel, -1)
        # keys before the query: n − 1 = −(rel + 1), with rel + 1 in [min + 1, 0]
        below = -(xp.where(before, rel, minus_one) + 1)
        if bidirectional:
            # keys at or after the query: n − 1 = rel − 1, with rel in [0, max]
            at_or_after = xp.where(before, xp.zeros_like(rel), rel) - 1
        else:
            at_or_after = minus_one  # later keys: n = 0, bucket 0
        n = xp.where(before, below, at_or_after)  # n − 1
    bucket = xp.searchsorted(starts_array, n, side="right")
    if bidirectional:
        after = xp.astype(rel > 0, bucket.dtype) * per_side  # keys after the query: upper half
        bucket = bucket + after
    return bucket


def t5_bucket(relative_position: Any, *, bidirectional: bool = True, num_buckets: int = 32,
              max_distance: int = 128) -> Any:
    """Bucket of each relative position ``key − query`` (HF ``memory_position −
    context_position``); same shape and integer dtype as ``relative_position``.

    Bidirectional (encoder): ``num_buckets // 2`` buckets per side, keys after the query
    (``rel > 0``) in the upper half. Unidirectional (decoder): keys after the query share
    bucket 0 with ``rel = 0``, ``n = max(−rel, 0)``. For a side of ``B`` buckets,
    ``max_exact = B // 2``: ``n < max_exact`` is its own bucket, larger ``n`` get
    ``max_exact + floor(ln(n/max_exact)/ln(max_distance/max_exact)·(B − max_exact))``
    capped at ``B − 1`` — evaluated exactly (integer thresholds, no floating-point log).
    """
    xp = array_api.namespace(relative_position=relative_position)
    bidirectional, per_side, max_distance = _config(bidirectional, num_buckets, max_distance)
    rel = relative_position
    if not hasattr(rel, "dtype"):
        rel = array_api.asarray(xp, rel)
    if not xp.isdtype(rel.dtype, "signed integer"):
        raise ParameterError(
            "relative_position must have a signed integer dtype (key − query distances), got "
            f"{array_api.dtype_name(rel.dtype)}")
    top = int(xp.iinfo(rel.dtype).max)
    if num_buckets - 1 > top:
        raise ParameterError(
            f"num_buckets={num_buckets} gives buckets up to {num_buckets - 1}, beyond the "
            f"{array_api.dtype_name(rel.dtype)} range of the result (relative_position's dtype, "
            f"largest {top}): pass a wider integer dtype")
    out = _buckets(xp, rel, bidirectional, per_side, max_distance, array_api.device_of(rel))
    return xp.astype(out, rel.dtype, copy=False)


def t5_bias(q_len: int, k_len: int, table: Any, *, bidirectional: bool = True,
            num_buckets: int = 32, max_distance: int = 128, query_offset: int = 0) -> Any:
    """The T5 position bias ``[heads, q_len, k_len]`` in ``table``'s dtype.

    ``table`` is the ``[num_buckets, heads]`` embedding of buckets. Query ``i`` sits at absolute
    position ``query_offset + i`` (decoding with a KV cache: HF's cache_position), key ``j`` at
    ``j``, and ``bias[h, i, j] = table[t5_bucket(j − (query_offset + i)), h]``: entries are
    copied from the table bit for bit. The distances take only ``q_len + k_len − 1`` values, so
    only those are bucketed and gathered; each row of the result is then a window of them. The
    result is contiguous (heads first), as fused attention kernels want a mask.
    """
    xp = array_api.namespace(table=table)
    bidirectional, per_side, max_distance = _config(bidirectional, num_buckets, max_distance)
    q_len = params.size("q_len", q_len, minimum=0)
    k_len = params.size("k_len", k_len, minimum=0)
    query_offset = params.integer("query_offset", query_offset, minimum=0)
    if query_offset + q_len + k_len > INDEX_LIMIT:
        raise ParameterError(
            f"query_offset={query_offset}, q_len={q_len} and k_len={k_len}: query_offset + "
            f"q_len + k_len = {query_offset + q_len + k_len} must be <= 2**31 − 1 = "
            f"{INDEX_LIMIT} (the distances are computed in 32-bit integers on some backends)")
    heads = int(_BIAS_INPUTS.check(xp, {"num_buckets": num_buckets}, table=table)["heads"])
    params.bias_entries(heads, q_len, k_len)
    device = array_api.device_of(table)
    if q_len == 0 or k_len == 0:
        return xp.zeros((heads, q_len, k_len), dtype=table.dtype, **_device_kw(device))

    # every distance j − (query_offset + i), ascending: r = t − (query_offset + q_len − 1)
    first = -(query_offset + q_len - 1)
    distances = xp.arange(first, k_len - query_offset, **_device_kw(device))
    rows = xp.take(xp.permute_dims(table, (1, 0)),
                   _buckets(xp, distances, bidirectional, per_side, max_distance, device,
                            bounded=True),
                   axis=1)  # [heads, q_len + k_len - 1], a fresh array
    return _toeplitz(xp, rows, q_len, k_len, device)


def _toeplitz(xp: Any, rows: Any, q_len: int, k_len: int, device: Any) -> Any:
    """``out[h, i, j] = rows[h, j − i + q_len − 1]``, contiguous: the layout fused attention
    kernels take as a mask (a heads-last view would be copied by every attention call)."""
    out = native.of(rows).toeplitz(rows, q_len, k_len)
    if out is not None:
        return out
    i = xp.arange(q_len, **_device_kw(device))
    j = xp.arange(k_len, **_device_kw(device))
    index = j[None, :] - i[:, None] + (q_len - 1)  # position of j − i − query_offset in rows
    out = xp.take(rows, xp.reshape(index, (-1,)), axis=1)
    return xp.reshape(out, (int(rows.shape[0]), q_len, k_len))


def _device_kw(device: Any) -> dict[str, Any]:
    return {} if device is None else {"device": device}


LAYERS = (Layer(
    "T5RelativeBias", "t5_bias",
    weights=(Weight("table", lambda c: (c["num_buckets"], c["num_heads"]), normal(0.02)),),
    sizes=("num_heads",), config=("bidirectional", "num_buckets", "max_distance"),
    doc="T5's bucketed bias table: layer(q_len, k_len, query_offset=0) -> [heads, q, k]"),)
