"""DeBERTa disentangled attention: log-bucketed relative positions (query − key) and the
content-to-position / position-to-content score terms (DeBERTa-v2/v3, ``pos_att_type="p2c|c2p"``).

The bucket is defined with a real logarithm and an exact ceiling, and lands exactly on an
integer at some distances (always at ``max_position − 1``), so a float ``log`` one ulp high
silently moves a bucket. No logarithm runs on the device here: the first distance of every
logarithmic bucket is an integer computed once on the host from the static parameters (a float64
estimate corrected with exact integer comparisons) and distances are bucketed by
``searchsorted`` against those integers — exact in every dtype, backend and mode.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from .. import array_api, native, params, shapes, validation
from ..errors import ParameterError
from ..layers import Layer, Weight, normal

__all__ = ["deberta_bucket", "deberta_scores"]

CLAMPS = ("transformers", "original")

# Distances are bucketed exactly up to this magnitude (the int32 range) in every dtype.
SUPPORTED = 2**31 - 1
# Largest number of logarithmic buckets per side a threshold table holds: only degenerate
# configurations (max_position barely above bucket_size/2 + 1) reach it before SUPPORTED.
MAX_THRESHOLDS = 1 << 12
_BEYOND = 2**33  # stands for any bucket start beyond SUPPORTED

_TABLES: dict[tuple[int, int, int], tuple[np.ndarray, int]] = {}
# torch.compiler.assume_constant_result(_compute_thresholds), made once torch is loaded (it
# cannot be made while dynamo traces): dynamo then evaluates a missing table as a constant
# instead of tracing the integer search.
_CONSTANT: list[Any] = []


def _config(bucket_name: str, bucket_size: Any, position_name: str,
            max_position: Any) -> tuple[int, int]:
    """Validated ``(mid, max_position)`` of a log-bucket configuration."""
    bucket_size = params.integer(bucket_name, bucket_size)
    if bucket_size < 2 or bucket_size % 2:
        raise ParameterError(
            f"{bucket_name}={bucket_size} must be an even integer >= 2 (bucket_size/2 exact "
            "distances per side, then logarithmic buckets)")
    mid = bucket_size // 2
    max_position = params.integer(position_name, max_position)
    if max_position < mid + 2:
        raise ParameterError(
            f"{position_name}={max_position} must be >= {bucket_name}/2 + 2 = {mid + 2}: the "
            f"bucket divides by ln(({position_name} − 1)/({bucket_name}/2)), which must be > 0")
    # operator.index makes torch.compile specialise on these values: once a recompile has seen
    # other values, plain ints turn symbolic and the host-side integer search would run on
    # sympy expressions
    return operator.index(mid), operator.index(max_position)


def _exceeds(a: int, j: int, mid: int, max_position: int) -> bool:
    """Whether ``ln(a/mid)/ln((M − 1)/mid)·(mid − 1) > j``, in exact integer arithmetic."""
    return a ** (mid - 1) * mid**j > (max_position - 1) ** j * mid ** (mid - 1)


def _first_exceeding(j: int, mid: int, max_position: int) -> int:
    """The smallest integer ``a`` whose log ratio exceeds ``j`` (the first distance of bucket
    ``mid + j + 1``), for ``a`` up to about 2**32.

    The real solution ``a* = mid·((M − 1)/mid)^(j/(mid − 1))`` is estimated in float64 with a
    relative error below 1e-14 (log1p keeps ratios near 1 accurate), i.e. below 1e-4 in
    absolute terms up to 2**33: ``floor(a*) + 1`` is then right unless ``a*`` lies within 1e-3
    of an integer (a tie, or nearly one), which is decided with exact integer comparisons.
    """
    try:
        log_ratio = math.log1p((max_position - 1 - mid) / mid)
    except OverflowError:  # a ratio beyond float range: its log is accurate enough directly
        log_ratio = math.log(max_position - 1) - math.log(mid)
    try:
        estimate = mid * math.exp(j * log_ratio / (mid - 1))
    except OverflowError:
        return _BEYOND
    if estimate >= _BEYOND:
        return _BEYOND
    nearest = round(estimate)
    if abs(estimate - nearest) >= 1e-3:
        return math.floor(estimate) + 1
    start = max(nearest, mid + 1)
    while start - 1 > mid and _exceeds(start - 1, j, mid, max_position):
        start -= 1
    while not _exceeds(start, j, mid, max_position):
        start += 1
    return start


def _compute_thresholds(mid: int, max_position: int, limit: int) -> tuple[np.ndarray, int]:
    starts: list[int] = []
    covered = limit
    if mid > 1:  # mid = 1: the log term is 0, every |r| > 1 is in bucket 1, no threshold
        for j in range(MAX_THRESHOLDS + 1):
            start = _first_exceeding(j, mid, max_position)
            if start > limit:
                break
            if j == MAX_THRESHOLDS:
                covered = start - 1
                break
            starts.append(start)
    table = np.asarray(starts, dtype=np.int64)
    return table, covered


def _wrap_for_dynamo() -> None:
    if not _CONSTANT and not native.compiling():
        wrapped = native.constant_result(_compute_thresholds)
        if wrapped is not None:
            _CONSTANT.append(wrapped)


def _thresholds(mid: int, max_position: int, limit: int) -> tuple[np.ndarray, int]:
    """``(starts, covered)``: ``starts[j]`` is the smallest distance whose bucket is at least
    ``mid + j + 1``, for every such start ``<= limit`` (``limit <= SUPPORTED``); distances up
    to ``covered`` (``limit`` unless the table is capped) are bucketed exactly by
    ``mid + #{starts <= |r|}``. Computed on the host once per configuration."""
    key = (mid, max_position, limit)
    hit = _TABLES.get(key)
    if hit is not None:
        return hit
    if native.compiling():
        # a cache filled while dynamo traces would break its guards: compute without storing
        compute = _CONSTANT[0] if _CONSTANT else _compute_thresholds
        return compute(mid, max_position, limit)
    _wrap_for_dynamo()
    _TABLES[key] = _compute_thresholds(mid, max_position, limit)
    return _TABLES[key]


def _bucket(xp: Any, rel: Any, mid: int, max_position: int, clamp: str, limit: int) -> Any:
    """Log buckets of the signed integer array ``rel``, exact for distances within the table
    built up to ``limit`` (see :func:`_thresholds`); larger distances get the table's last
    bucket. Computed in at least 32-bit integers, on distances clipped to the table's reach
    (nothing overflows, even at the dtype's minimum); the result is in that wider dtype."""
    rel = array_api.at_least_int32(xp, rel)  # int8/int16: mid + count would wrap
    reach = min(limit, SUPPORTED)
    if clamp == "original":
        reach = min(reach, max_position - 1)
    # distances beyond reach lie outside the table (eager calls refuse them, deberta_scores has
    # none) and get its last bucket either way; with clamp="original" this is the clamp. No
    # other distance changes, and −reach fits the dtype, so abs() cannot overflow
    rel = xp.clip(rel, -reach, reach)
    if mid >= reach:  # no distance reaches a logarithmic bucket
        return rel
    starts, _ = _thresholds(mid, max_position, reach)
    a = xp.abs(rel)
    if starts.size:
        table = array_api.asarray(xp, starts, dtype=rel.dtype, device=array_api.device_of(rel))
        count = xp.astype(xp.searchsorted(table, a, side="right"), rel.dtype)
    else:
        count = xp.zeros_like(a)
    magnitude = xp.where(a <= mid, a, count + mid)
    return xp.where(rel < 0, -magnitude, magnitude)


def _largest_bucket(mid: int, max_position: int, clamp: str, reach: int) -> int:
    """The largest bucket magnitude :func:`_bucket` gives for distances up to ``reach``."""
    if clamp == "original":
        reach = min(reach, max_position - 1)
    if reach <= mid:
        return reach
    starts, _ = _thresholds(mid, max_position, reach)
    return mid + int(starts.size)  # the table holds the starts up to reach


def _signed_integers(xp: Any, name: str, value: Any) -> Any:
    if not hasattr(value, "dtype"):
        value = array_api.asarray(xp, value)
    if not xp.isdtype(value.dtype, "signed integer"):
        raise ParameterError(
            f"{name} must have a signed integer dtype (query − key distances), got "
            f"{array_api.dtype_name(value.dtype)}")
    return value


def deberta_bucket(relative_position: Any, *, bucket_size: int = 256, max_position: int = 512,
                   clamp: str = "transformers") -> Any:
    """DeBERTa-v2/v3 log bucket of each relative position ``r`` (query − key); same shape
    and signed integer dtype as ``relative_position``.

    ``mid = bucket_size/2``. ``|r| <= mid`` maps to ``r``; larger distances to
    ``sign(r)·(mid + ceil(ln(|r|/mid)/ln((max_position − 1)/mid)·(mid − 1)))``, evaluated
    exactly (integer thresholds, no floating-point log). ``clamp="transformers"`` (HF
    transformers, microsoft/DeBERTa's first NumPy version) applies the formula to every ``r``,
    so buckets keep growing past ``±(bucket_size − 1)`` for ``|r| >= max_position``;
    ``clamp="original"`` (microsoft/DeBERTa's lookup-table version) clamps ``r`` to
    ``±(max_position − 1)`` first, so buckets stay within ``±(bucket_size − 1)``.

    Distances are bucketed exactly up to magnitude ``2**31 − 1`` (and, in degenerate
    configurations, up to the 4096th logarithmic bucket); an eager call raises
    :class:`~posenc.errors.PositionOutOfRangeError` beyond (with ``clamp="original"`` only when
    ``max_position − 1`` is beyond). Inside jax.jit / torch.compile / tf.function values cannot
    be checked and such distances get the last bucket of the table.
    """
    xp = array_api.namespace(relative_position=relative_position)
    mid, max_position = _config("bucket_size", bucket_size, "max_position", max_position)
    params.choice("clamp", clamp, CLAMPS)
    rel = _signed_integers(xp, "relative_position", relative_position)
    limit = int(xp.iinfo(rel.dtype).max)
    # at most mid + MAX_THRESHOLDS: only narrow dtypes (or a huge mid) need the table here
    largest = 0 if mid + MAX_THRESHOLDS <= limit else _largest_bucket(
        mid, max_position, clamp, min(limit, SUPPORTED))
    if largest > limit:
        raise ParameterError(
            f"bucket_size={2 * mid} and max_position={max_position} (clamp={clamp!r}) give "
            f"buckets up to ±{largest} for {array_api.dtype_name(rel.dtype)} relative positions, "
            f"beyond the {array_api.dtype_name(rel.dtype)} range of the result: pass a wider "
            "integer dtype")
    if not array_api.is_traced(rel) and math.prod(tuple(rel.shape)) > 0:
        lo, hi = int(xp.min(rel)), int(xp.max(rel))
        reach = min(limit, SUPPORTED)
        if clamp == "original":
            lo, hi = (min(max(v, 1 - max_position), max_position - 1) for v in (lo, hi))
            reach = min(reach, max_position - 1)
        _, covered = _thresholds(mid, max_position, reach)
        for value in (lo, hi):
            if abs(value) > covered:
                array_api.raise_out_of_range("relative_position", value, -covered, covered + 1)
    out = _bucket(xp, rel, mid, max_position, clamp, limit)
    return xp.astype(out, rel.dtype, copy=False)


_SCORE_INPUTS = validation.Inputs("deberta_scores", messages={
    "rank": "{name} must have at least {min_rank} dims [..., rows, d], got shape {shape}",
    "axis:d": "q, k and the relative tables must share the last dim d, got shapes {shapes}",
    "dtypes": "q, k and the relative tables must share one dtype, but {is_listed}"})


def deberta_scores(q: Any, k: Any, rel_k: Any = None, rel_q: Any = None, *,
                   position_buckets: int = 256, max_relative_positions: int = 512,
                   clamp: str = "transformers", scale: float | None = None) -> Any:
    """DeBERTa disentangled attention scores ``[..., q_len, k_len]``, dtype of ``q``.

    ``S_ij = (q_i·k_j + q_i·rel_k[c_ij] + k_j·rel_q[c_ij]) · s`` with
    ``c_ij = clip(δ(i − j) + span, 0, 2·span − 1)``, query ``i`` at position ``i`` and key ``j``
    at position ``j`` (both from 0, HF ``build_relative_position``), ``δ`` the log bucket
    (:func:`deberta_bucket` with ``bucket_size=position_buckets``,
    ``max_position=max_relative_positions``) or the plain distance when
    ``position_buckets <= 0``. ``span = position_buckets`` if > 0, else
    ``max_relative_positions``. The position-to-content term uses the same index ``c_ij`` as
    content-to-position (real code; the paper writes ``δ(j, i)``).

    ``q`` ``[..., q_len, d]``, ``k`` ``[..., k_len, d]``; ``rel_k`` (content-to-position, the
    projected ``P W_{K,r}``) and ``rel_q`` (position-to-content, ``P W_{Q,r}``) are
    ``[..., 2·span, d]``; leading dims broadcast (e.g. per-head tables ``[heads, 2·span, d]``).
    A missing table drops its term. ``s = 1/sqrt(d·(1 + number of tables))`` unless ``scale``
    is given (it must be when ``d = 0``). Computed in float32 (float64 for float64 inputs), cast back.
    """
    xp = array_api.namespace(q=q, k=k, rel_k=rel_k, rel_q=rel_q)
    arrays = {n: a for n, a in (("q", q), ("k", k), ("rel_k", rel_k), ("rel_q", rel_q))
              if a is not None or n in ("q", "k")}
    _SCORE_INPUTS.check(xp, **arrays)
    position_buckets = operator.index(params.size("position_buckets", position_buckets, minimum=None))
    bucketed = position_buckets > 0
    if bucketed:
        mid, max_relative_positions = _config("position_buckets", position_buckets,
                                              "max_relative_positions", max_relative_positions)
        span = position_buckets
    else:
        max_relative_positions = operator.index(params.integer(
            "max_relative_positions", max_relative_positions, minimum=1))
        mid, span = 0, max_relative_positions
    params.choice("clamp", clamp, CLAMPS)
    params.scale(scale)
    for name in ("rel_k", "rel_q"):
        table = arrays.get(name)
        if table is not None and int(table.shape[-2]) != 2 * span:
            which = (f"position_buckets={position_buckets}" if bucketed else
                     f"max_relative_positions={max_relative_positions} (position_buckets="
                     f"{position_buckets} <= 0)")
            raise ParameterError(
                f"{name} has shape {tuple(table.shape)}: expected 2·span = {2 * span} rows "
                f"(axis -2) for {which}")
    shapes.broadcast_batch({n: tuple(a.shape[:-2]) for n, a in arrays.items()})

    terms = (rel_k is not None) + (rel_q is not None)
    s = params.default_scale(scale, tuple(q.shape), factor=1 + terms,
                              rule="1/sqrt(d·(1 + number of tables))")
    compute = array_api.compute_dtype(xp, q.dtype)
    qc, kc = xp.astype(q, compute, copy=False), xp.astype(k, compute, copy=False)
    scores = xp.matmul(qc, xp.matrix_transpose(kc))
    q_len, k_len = int(q.shape[-2]), int(k.shape[-2])
    if terms and q_len > 0 and k_len > 0:
        device = array_api.device_of(q)
        # The q_len + k_len − 1 distinct distances i − j, ascending, bucketed once.
        rel = xp.arange(-(k_len - 1), q_len, device=device)
        if bucketed:
            # the table covers every distance here; it is the same for all lengths up to
            # max_relative_positions
            limit = operator.index(max(q_len, k_len, max_relative_positions))
            rel = _bucket(xp, rel, mid, max_relative_positions, clamp, limit)
        rows = xp.clip(rel + span, 0, 2 * span - 1)
        grid = xp.arange(q_len, device=device)[:, None] - xp.arange(k_len, device=device)[None, :]
        index = xp.reshape(xp.take(rows, xp.reshape(grid + (k_len - 1), (-1,)), axis=0),
                           (q_len, k_len))
        if rel_k is not None:
            c2p = xp.matmul(qc, xp.matrix_transpose(xp.astype(rel_k, compute, copy=False)))
            at = xp.broadcast_to(index, (*c2p.shape[:-2], q_len, k_len))
            scores = scores + xp.take_along_axis(c2p, at, axis=-1)
        if rel_q is not None:
            p2c = xp.matmul(kc, xp.matrix_transpose(xp.astype(rel_q, compute, copy=False)))
            at = xp.broadcast_to(xp.matrix_transpose(index), (*p2c.shape[:-2], k_len, q_len))
            scores = scores + xp.matrix_transpose(xp.take_along_axis(p2c, at, axis=-1))
    return xp.astype(scores * s, q.dtype, copy=False)


_wrap_for_dynamo()


def _span(c: Any) -> int:
    return c["position_buckets"] if c["position_buckets"] > 0 else c["max_relative_positions"]


LAYERS = (Layer(
    "DebertaRelativeScores", "deberta_scores",
    weights=(Weight("rel_k", lambda c: (2 * _span(c), c["head_dim"]), normal(0.02),
                    optional="c2p"),
             Weight("rel_q", lambda c: (2 * _span(c), c["head_dim"]), normal(0.02),
                    optional="p2c")),
    sizes=("head_dim", "c2p", "p2c"), size_defaults={"c2p": True, "p2c": True},
    config=("position_buckets", "max_relative_positions", "clamp", "scale"),
    doc="DeBERTa's disentangled scores with trained (projected) relative tables: layer(q, k)"),)
