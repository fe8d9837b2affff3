"""Properties of the T5 relative bias: bucket layout, exactness at the log edges, and the
structure of the bias (translation invariance, cache decoding, exact gathers)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st

from ..context import CheckFailure, Context
from . import register

HEADS = 3
DRAWN = 64  # distances per drawn example: one fixed shape, one compilation


def _config(ctx: Context) -> tuple[bool, int, int]:
    cfg = {**ctx.spec.defaults(), **ctx.params}
    return bool(cfg["bidirectional"]), int(cfg["num_buckets"]), int(cfg["max_distance"])


def _side(bidirectional: bool, num_buckets: int) -> tuple[int, int]:
    """(buckets per side, max_exact)."""
    per_side = num_buckets // 2 if bidirectional else num_buckets
    return per_side, per_side // 2


def expected_buckets(rel: np.ndarray, bidirectional: bool, num_buckets: int,
                     max_distance: int) -> np.ndarray:
    """An independent bucketing: the log formula in float64, and wherever the float64 value is
    within 1e-9 of an integer (where rounding could decide), the exact integer comparison
    ``n^e · m^k >= D^k · m^e`` instead."""
    rel = np.asarray(rel, dtype=np.int64)
    per_side, m = _side(bidirectional, num_buckets)
    e = per_side - m
    if bidirectional:
        offset, n = np.where(rel > 0, per_side, 0), np.abs(rel)
    else:
        offset, n = np.zeros_like(rel), np.maximum(-rel, 0)
    with np.errstate(divide="ignore"):
        value = np.log(np.maximum(n, 1) / m) / math.log(max_distance / m) * e
    k = np.floor(value).astype(np.int64)
    for idx in np.argwhere(np.abs(value - np.round(value)) < 1e-9):
        idx = tuple(idx)
        nn, kk = int(n[idx]), round(float(value[idx]))
        k[idx] = kk if nn**e * m**kk >= max_distance**kk * m**e else kk - 1
    large = m + np.minimum(k, e - 1)
    return offset + np.where(n < m, n, large)


def _window(max_distance: int) -> np.ndarray:
    return np.arange(-3 * max_distance - 2, 3 * max_distance + 3)


@register("t5_bucket_range_and_sides")
def range_and_sides(ctx: Context) -> None:
    """Buckets lie in [0, num_buckets); bidirectional: keys before (or at) the query use the
    lower half, keys after it the upper half; unidirectional: keys after the query share
    bucket 0. Distances below max_exact are their own bucket, distances from max_distance on
    all share the last bucket of their side."""
    bidirectional, nb, md = _config(ctx)
    per_side, m = _side(bidirectional, nb)
    rel = _window(md)
    b = ctx.run({"relative_position": rel})
    if b.min() < 0 or b.max() >= nb:
        raise CheckFailure(f"buckets range over [{b.min()}, {b.max()}], outside [0, {nb})")
    after = rel > 0
    if bidirectional:
        if (b[after] < per_side).any() or (b[~after] >= per_side).any():
            bad = rel[(after & (b < per_side)) | (~after & (b >= per_side))][0]
            raise CheckFailure(f"distance {bad} is in the wrong half: bucket "
                               f"{b[rel == bad][0]} (per side: {per_side})")
        n, base = np.abs(rel), np.where(after, per_side, 0)
    else:
        if (b[after] != 0).any():
            bad = rel[after & (b != 0)][0]
            raise CheckFailure(f"unidirectional: key after the query (distance {bad}) has "
                               f"bucket {b[rel == bad][0]}, not 0")
        n, base = np.maximum(-rel, 0), np.zeros_like(rel)
    small = n < m
    ctx.assert_equal(b[small], (base + n)[small], f"exact buckets (|distance| < {m})")
    far = n >= md
    ctx.assert_equal(b[far], (base + per_side - 1)[far], f"|distance| >= max_distance={md}")


@register("t5_bucket_monotonic")
def monotonic(ctx: Context) -> None:
    """On each side, the bucket never decreases as the distance grows."""
    bidirectional, _, md = _config(ctx)
    rel = _window(md)
    b = ctx.run({"relative_position": rel})
    before = b[rel <= 0][::-1]  # distances 0, -1, -2, ...: keys further back
    sides = [("keys before the query", before, -np.arange(before.size))]
    if bidirectional:
        sides.append(("keys after the query", b[rel > 0], rel[rel > 0]))
    for what, buckets, distances in sides:
        drop = np.nonzero(np.diff(buckets) < 0)[0]
        if drop.size:
            i = int(drop[0])
            raise CheckFailure(f"{what}: bucket decreases from {buckets[i]} (distance "
                               f"{distances[i]}) to {buckets[i + 1]} (distance "
                               f"{distances[i + 1]})")


def _tie_points(bidirectional: bool, nb: int, md: int) -> np.ndarray:
    """Distances where e·ln(n/m)/ln(D/m) is (nearly) an integer, with their neighbours."""
    per_side, m = _side(bidirectional, nb)
    e = per_side - m
    ties = [round(m * (md / m) ** (k / e)) for k in range(e + 1)]
    return np.unique([t + d for t in ties for d in (-1, 0, 1)])


@register("t5_bucket_exact")
def exact(ctx: Context) -> None:
    """Buckets equal an independent float64 + exact-integer computation, on drawn distances
    that include every point where the log expression is (nearly) an integer: a float32 log
    one ulp low drops a bucket exactly there."""
    bidirectional, nb, md = _config(ctx)
    ties = _tie_points(bidirectional, nb, md)
    ties = np.concatenate([ties, -ties])

    @ctx.given(seed=st.integers(0, 2**32 - 1))
    def check(seed: int) -> None:
        rng = np.random.default_rng(seed)
        picks = rng.choice(ties, size=DRAWN // 2)
        spread = rng.integers(-4 * md, 4 * md + 1, size=DRAWN // 2)
        rel = np.concatenate([picks, spread])
        got = ctx.run({"relative_position": rel})
        want = expected_buckets(rel, bidirectional, nb, md)
        if not np.array_equal(got, want):
            i = int(np.nonzero(got != want)[0][0])
            raise CheckFailure(f"distance {rel[i]}: bucket {got[i]:g}, expected {want[i]} "
                               f"(num_buckets={nb}, max_distance={md}, "
                               f"bidirectional={bidirectional})")


# -- t5_bias ----------------------------------------------------------------------------------
def _bias(ctx: Context, table: np.ndarray, q_len: int, k_len: int, offset: int) -> np.ndarray:
    return ctx.run({"table": table}, q_len=q_len, k_len=k_len, query_offset=offset)


def _length(ctx: Context) -> int:
    """Long enough that distances pass max_distance."""
    return int(ctx.args.get("length", _config(ctx)[2] + 12))


@register("t5_bias_gather_exact")
def gather_exact(ctx: Context) -> None:
    """Every entry is copied bit for bit from the table: bias[:, i, j] is the table row of the
    bucket of j − (query_offset + i) (bucket from the independent computation)."""
    bidirectional, nb, md = _config(ctx)
    # distances from -(md + 14) to md + 9: both sides pass max_distance
    q_len, k_len, offset = 5, 2 * md + 20, md + 10

    @ctx.given(seed=st.integers(0, 2**32 - 1))
    def check(seed: int) -> None:
        table = ctx.normal((nb, HEADS), seed)
        out = _bias(ctx, table, q_len, k_len, offset)
        rel = np.arange(k_len)[None, :] - (offset + np.arange(q_len))[:, None]
        want = np.moveaxis(table[expected_buckets(rel, bidirectional, nb, md)], -1, 0)
        ctx.assert_equal(out, want, f"bias entries (q_len={q_len}, k_len={k_len}, "
                                    f"query_offset={offset})")


@register("t5_bias_translation")
def translation(ctx: Context) -> None:
    """The bias depends only on j − (query_offset + i): the square bias is constant along
    diagonals, moving the queries by c (query_offset=c) selects rows c.. of the bias of c more
    queries, and equals the zero-offset bias shifted c columns to the right."""
    q_len, c = 6, 9
    length = _length(ctx)
    table = ctx.normal((_config(ctx)[1], HEADS), 5)
    square = _bias(ctx, table, length, length, 0)
    ctx.assert_equal(square[:, 1:, 1:], square[:, :-1, :-1], "diagonals of the square bias")
    moved = _bias(ctx, table, q_len, length, c)
    taller = _bias(ctx, table, q_len + c, length, 0)
    ctx.assert_equal(moved, taller[:, c:], f"query_offset={c} against rows {c}.. of the "
                                           "zero-offset bias")
    narrower = _bias(ctx, table, q_len, length - c, 0)
    ctx.assert_equal(moved[:, :, c:], narrower, f"query_offset={c}: columns {c}.. against the "
                                                "zero-offset bias")


@register("t5_bias_cache_decoding")
def cache_decoding(ctx: Context) -> None:
    """Decoding with a KV cache: one query at query_offset=p (and a chunk of queries starting
    there) reproduces rows p.. of the full square bias, bit for bit."""
    length = _length(ctx)
    table = ctx.normal((_config(ctx)[1], HEADS), 6)
    full = _bias(ctx, table, length, length, 0)
    for p in (0, length // 2, length - 1):
        step = _bias(ctx, table, 1, p + 1, p)
        ctx.assert_equal(step, full[:, p:p + 1, :p + 1], f"decode step at position {p}")
    chunk = 4
    p = length - chunk
    got = _bias(ctx, table, chunk, length, p)
    ctx.assert_equal(got, full[:, p:], f"chunk of {chunk} queries at query_offset={p}")


@register("t5_flex_score_mod")
def flex_score_mod(ctx: Context) -> None:
    """torch only: flex_attention with ``t5_score_mod`` (the bias of the q_len + k_len − 1
    distances, indexed by kv_idx − q_idx) equals attention with the backend's materialised
    ``t5_bias`` and the float64 reference, for a chunk of queries at a query_offset whose
    distances reach past max_distance (decoder: under the causal mask of that offset); the
    score_mod holds O(heads · length) numbers; in float64 the table's gradient through
    flex_attention matches finite differences (see conformance/flex.py)."""
    from .flex_score_mods import check_score_mod

    bidirectional, nb, md = _config(ctx)
    q_len, k_len, offset = 10, 40, 30  # queries at 30..39: distances -39 .. 9

    def build(make: Callable[..., Any], arrays: dict[str, Any], device: Any) -> Any:
        return make(q_len, k_len, arrays["table"], bidirectional=bidirectional, num_buckets=nb,
                    max_distance=md, query_offset=offset)

    check_score_mod(ctx, name="t5_score_mod", build=build,
                    inputs={"table": ctx.normal((nb, HEADS), 9)},
                    params={"q_len": q_len, "k_len": k_len, "query_offset": offset},
                    heads=HEADS, q_len=q_len, k_len=k_len,
                    query_offset=None if bidirectional else offset, scale=1.0,
                    flex_bias_rtol=0.0)  # entries copied from the table
