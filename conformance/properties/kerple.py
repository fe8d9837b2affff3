"""Properties of KERPLE: a non-positive, non-increasing kernel of |i - j| with exact anchors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st

from ..context import CheckFailure, Context
from . import register

HEADS, Q_LEN, K_LEN = 4, 5, 9
TINY = 2.0**-6  # the input grid's quantum: positive and exact in every dtype


def _positive(ctx: Context, seed: int, high: float) -> np.ndarray:
    """Per-head parameters in [2**-6, high], exact in every dtype under test."""
    return np.clip(np.abs(ctx.normal((HEADS,), seed)), TINY, high)


def _distance(q_len: int, k_len: int) -> np.ndarray:
    i = np.arange(k_len - q_len, k_len)[:, None]  # queries are the last q_len positions
    return np.abs(i - np.arange(k_len)[None, :])


def _high(ctx: Context) -> float:
    return 2.0 if ctx.params.get("form", "log") == "power" else 3.5


@register("kerple_relative")
def relative(ctx: Context) -> None:
    """The bias depends on the positions only through |i - j| (constant on each diagonal and
    equal on mirrored diagonals) and is 0 at distance 0."""
    r1, r2 = _positive(ctx, 1, 3.5), _positive(ctx, 2, _high(ctx))
    out = ctx.run({"r1": r1, "r2": r2}, q_len=Q_LEN, k_len=K_LEN)
    if out.shape != (HEADS, Q_LEN, K_LEN):
        raise CheckFailure(f"shape {out.shape}, expected {(HEADS, Q_LEN, K_LEN)}")
    distance = _distance(Q_LEN, K_LEN)
    for d in np.unique(distance):
        values = out[:, distance == d]
        ctx.assert_close(values, np.broadcast_to(values[:, :1], values.shape),
                         f"entries at |i - j| = {d} differ")
    ctx.assert_close(out[:, distance == 0], np.zeros((HEADS, Q_LEN)), "bias at distance 0",
                     scale=1.0)


@register("kerple_monotone")
def monotone(ctx: Context) -> None:
    """For any valid parameters the bias is <= 0 and non-increasing in |i - j| (each head)."""
    q_len = k_len = 12

    @ctx.given(seed=st.integers(0, 2**32 - 1))
    def check(seed: int) -> None:
        r1, r2 = _positive(ctx, seed, 3.5), _positive(ctx, seed + 1, _high(ctx))
        out = ctx.run({"r1": r1, "r2": r2}, q_len=q_len, k_len=k_len)
        last = out[:, -1, ::-1]  # the last query's row by increasing distance 0 .. k_len - 1
        slack = ctx.tol.rtol * np.abs(last[:, :-1]) + ctx.tol.atol
        if np.any(last > slack[:, :1]):
            raise CheckFailure(f"positive bias for r1={r1}, r2={r2}: {last.max()}")
        rises = last[:, 1:] - last[:, :-1] > slack
        if rises.any():
            h, d = (int(v) for v in np.argwhere(rises)[0])
            raise CheckFailure(
                f"head {h} (r1={r1[h]}, r2={r2[h]}): bias rises from distance {d} to {d + 1}: "
                f"{last[h, d]!r} -> {last[h, d + 1]!r}")


@register("kerple_anchors")
def anchors(ctx: Context) -> None:
    """Values known in closed form. Power form: distance 1 gives exactly -r1 (1**r2 = 1), r2 = 1
    gives the linear -r1 |i - j| (a symmetric ALiBi) and r2 = 2 the quadratic. Log form:
    distance 1 gives -r1 * log1p(r2), also for tiny r2 where log(1 + r2) in float32 is wrong."""
    r1 = np.array([1.0, 2.0, 1.5, 3.0])
    distance = _distance(Q_LEN, K_LEN)
    for r2_value in (0.25, 1.0, 2.0):
        r2 = np.full(HEADS, r2_value)
        out = ctx.run({"r1": r1, "r2": r2}, q_len=Q_LEN, k_len=K_LEN, form="power")
        unit = out[:, distance == 1]
        ctx.assert_equal(unit, np.broadcast_to(-r1[:, None], unit.shape),
                         f"power form, r2={r2_value}: bias at distance 1 vs -r1")
        if r2_value != 0.25:
            expected = -r1[:, None, None] * distance.astype(np.float64)[None] ** r2_value
            ctx.assert_close(out, expected, f"power form with r2={r2_value}")
    # 1 + r2 rounds in float32 for the first two heads (to 1 for 2**-24): log(1 + r2) is off
    # by 100% and 20% there. They are exact in every dtype (float16 subnormals), and so are
    # the results r1 * r2 (r1 >= 1).
    r2 = np.array([2.0**-24, 5 * 2.0**-24, 0.5, 2.0])
    out = ctx.run({"r1": r1, "r2": r2}, q_len=Q_LEN, k_len=K_LEN, form="log")
    got = out[:, distance == 1][:, 0]
    expected = -r1 * np.log1p(r2)
    for h in range(HEADS):  # relative per head: the tiny heads are far below the others
        ctx.assert_close(got[h:h + 1], expected[h:h + 1],
                         f"log form, r2={r2[h]!r}: bias at distance 1 vs -r1 * log1p(r2)")


@register("kerple_kv_cache_alignment")
def kv_cache_alignment(ctx: Context) -> None:
    """Queries sit at the end of the keys: rows for q_len < k_len equal the last rows of the
    square bias."""
    r1, r2 = _positive(ctx, 3, 3.5), _positive(ctx, 4, _high(ctx))
    square = ctx.run({"r1": r1, "r2": r2}, q_len=K_LEN, k_len=K_LEN)
    for q_len in (1, 3):
        part = ctx.run({"r1": r1, "r2": r2}, q_len=q_len, k_len=K_LEN)
        ctx.assert_close(part, square[:, K_LEN - q_len:],
                         f"q_len={q_len} vs the last rows of q_len=k_len={K_LEN}")


@register("kerple_invalid_parameters")
def invalid_parameters(ctx: Context) -> None:
    """A non-positive r1 or r2 (or r2 > 2 in the power form): eager calls raise an error naming
    the parameter and the value; compiled calls (values unknown while tracing) give NaN in that
    head only."""
    form = ctx.params.get("form", "log")
    good = np.array([0.5, 1.0, 1.5, 2.0])
    bad_cases = [("r1", 1, -0.5), ("r2", 2, 0.0)]
    if form == "power":
        bad_cases.append(("r2", 3, 2.5))
    for name, head, value in bad_cases:
        inputs = {"r1": good.copy(), "r2": good.copy()}
        inputs[name][head] = value
        if ctx.mode == "eager":
            try:
                out = ctx.run(inputs, q_len=2, k_len=4)
            except ValueError as exc:
                if name not in str(exc) or repr(value) not in str(exc):
                    raise CheckFailure(f"{name}[{head}]={value}: the error does not name the "
                                       f"parameter and the value: {exc}") from exc
                continue
            raise CheckFailure(f"{name}[{head}]={value} (form={form!r}) returned a bias instead "
                               f"of raising: {out[head, -1]}")
        out = ctx.run(inputs, q_len=2, k_len=4)
        if not np.all(np.isnan(out[head])):
            raise CheckFailure(f"compiled: {name}[{head}]={value} gives {out[head, -1]}, not NaN")
        others = np.delete(out, head, axis=0)
        if np.isnan(others).any():
            raise CheckFailure(f"compiled: {name}[{head}]={value} made other heads NaN")


@register("kerple_flex_score_mod")
def flex_score_mod(ctx: Context) -> None:
    """torch only: flex_attention with ``kerple_score_mod`` (the kernel of each distance
    0 .. k_len − 1, indexed by |i − kv_idx|) equals attention with the backend's materialised
    ``kerple`` and the float64 reference under the end-aligned causal mask; the score_mod
    holds O(heads · k_len) numbers; in float64 the gradients of r1 and r2 through
    flex_attention match finite differences (see conformance/flex.py)."""
    from .flex_score_mods import check_score_mod

    form = ctx.params.get("form", "log")
    q_len, k_len = 10, 40
    # r2 <= 1.75: the finite differences stay inside the power form's r2 <= 2
    r1, r2 = _positive(ctx, 5, 3.5), _positive(ctx, 6, 1.75 if form == "power" else 3.5)

    def build(make: Callable[..., Any], arrays: dict[str, Any], device: Any) -> Any:
        return make(q_len, k_len, arrays["r1"], arrays["r2"], form=form)

    # the kernel vector comes from kerple itself, rounded to the dtype under test
    check_score_mod(ctx, name="kerple_score_mod", build=build, inputs={"r1": r1, "r2": r2},
                    params={"q_len": q_len, "k_len": k_len}, heads=HEADS, q_len=q_len,
                    k_len=k_len, query_offset=k_len - q_len, scale=None,
                    flex_bias_rtol=ctx.tol.rtol + ctx.tol.atol)
