"""Properties of the sinusoidal table."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ..context import CheckFailure, Context
from . import register

DIM = 32


def _table(ctx: Context, positions: np.ndarray, **params: object) -> np.ndarray:
    return ctx.run({"positions": positions}, **{"dim": DIM, **params})


def sin_cos_columns(dim: int, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """Columns holding sin a_i and cos a_i of the same angle, pair by pair."""
    if layout == "interleaved":
        return np.arange(0, dim - 1, 2), np.arange(1, dim, 2)
    half_sin = (dim + 1) // 2 if layout == "concat" else dim // 2
    return np.arange(dim // 2), half_sin + np.arange(dim // 2)


@register("sinusoidal_bounded")
def bounded(ctx: Context) -> None:
    """Every value is finite and inside [-1, 1], far out in position too."""

    @ctx.given(seed=st.integers(0, 2**32 - 1), top=st.sampled_from([64, 2**12, 2**20]))
    def check(seed: int, top: int) -> None:
        positions = np.random.default_rng(seed).integers(0, top, size=16)
        table = _table(ctx, positions)
        if not np.all(np.isfinite(table)) or np.abs(table).max() > 1.0:
            # NaN and infinities first (nanargmax fails on an all-NaN table)
            size = np.where(np.isfinite(table), np.abs(table), np.inf)
            worst = np.unravel_index(np.argmax(size), table.shape)
            raise CheckFailure(f"value {table[worst]!r} at index {tuple(map(int, worst))} "
                               "is not finite or outside [-1, 1]")


@register("sinusoidal_linear_shift")
def linear_shift(ctx: Context) -> None:
    """PE[k + c] = M_c PE[k] with M_c block rotations independent of k: for each frequency,
    (sin, cos)(k + c) is (sin, cos)(k) rotated by the angle whose (sin, cos) is row PE[c]."""
    layout = ctx.params.get("layout", "interleaved")
    s_cols, c_cols = sin_cos_columns(DIM, layout)

    @ctx.given(k=st.integers(0, 4096), c=st.integers(0, 4096))
    def check(k: int, c: int) -> None:
        rows = _table(ctx, np.array([k, c, k + c]))
        (sk, ck), (sc, cc), (skc, ckc) = ((r[s_cols], r[c_cols]) for r in rows)
        predicted = np.concatenate([sk * cc + ck * sc, ck * cc - sk * sc])
        ctx.assert_close(np.concatenate([skc, ckc]), predicted, f"PE[{k}+{c}] vs M_{c} PE[{k}]",
                         scale=1.0, angle_bound=float(k + c), tol=ctx.tol.loosened(3))


@register("sinusoidal_distance_dot_product")
def distance_dot_product(ctx: Context) -> None:
    """<PE[m], PE[n]> depends only on m - n."""

    @ctx.given(m=st.integers(0, 2048), n=st.integers(0, 2048), shift=st.integers(0, 2048))
    def check(m: int, n: int, shift: int) -> None:
        rows = _table(ctx, np.array([m, n, m + shift, n + shift]))
        before, after = rows[0] @ rows[1], rows[2] @ rows[3]
        t = ctx.tol
        allowed = 4 * DIM * (t.rtol + t.atol + t.angle * t.compute_eps * (max(m, n) + shift))
        if abs(after - before) > allowed:
            raise CheckFailure(
                f"<PE[m], PE[n]> changed under a shift: m={m}, n={n}, shift={shift}: "
                f"{before:.9g} -> {after:.9g} (tolerance {allowed:.3e})",
                {"max_abs": abs(after - before), "tolerance": allowed})
