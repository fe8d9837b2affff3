"""Properties of Su's hierarchical decomposition of a learned table."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ..context import CheckFailure, Context
from . import register
from .learned import refuses_out_of_range, rows_bit_for_bit

N, DIM = 8, 6  # one table shape for every property: new shapes recompile under torch.compile


def _alpha(ctx: Context) -> float:
    return float({**ctx.spec.defaults(), **ctx.params}["alpha"])


@register("hierarchical_matches_table")
def matches_table(ctx: Context) -> None:
    """Positions below n return the trained rows bit for bit, whatever alpha is."""
    rows_bit_for_bit(ctx, N, DIM, "rows of positions < n")


@register("hierarchical_block_structure")
def block_structure(ctx: Context) -> None:
    """Over all n² positions k = i·n + j: within a block the rows move like the table,
    q_{i·n+j} − q_{i·n} = p_j − p_0, and the block starts are q_{i·n} − p_0 = alpha/(1−alpha)·(p_i − p_0).
    Together they pin every row: a swapped i/j, a wrong alpha or a 1-based index fails one."""
    c = _alpha(ctx) / (1.0 - _alpha(ctx))
    # Each difference involves two rounded outputs, hence twice the tolerance of one.
    tol = ctx.tol.loosened(2.0)

    @ctx.given(seed=st.integers(0, 2**32 - 1))
    def check(seed: int) -> None:
        table = ctx.normal((N, DIM), seed)
        out = ctx.run({"positions": np.arange(N * N), "table": table})
        q = out.reshape(N, N, DIM)  # q[i, j] is position i·n + j
        scale = max(float(np.abs(out).max()), float(np.abs(table).max())) or 1.0
        ctx.assert_close(q - q[:, :1], np.broadcast_to(table - table[:1], q.shape),
                         "q[i·n + j] − q[i·n] against p_j − p_0", scale=scale, tol=tol)
        ctx.assert_close(q[:, 0] - table[:1], c * (table - table[:1]),
                         f"q[i·n] − p_0 against alpha/(1 − alpha)·(p_i − p_0), alpha={_alpha(ctx)}",
                         scale=scale, tol=tol)


@register("hierarchical_out_of_range")
def out_of_range(ctx: Context) -> None:
    """Positions outside [0, n²) (not [0, n)): with 'error' eager calls raise naming the position,
    compiled calls give NaN rows; with 'clip' they take the rows of 0 and n² − 1."""
    table = ctx.normal((N, DIM), 0)
    last = N * N - 1
    c = _alpha(ctx) / (1.0 - _alpha(ctx))
    q_last = table[N - 1] + c * (table[N - 1] - table[0])
    scale = float(np.abs(q_last).max())
    for bad in (N * N, -1, 10 * N * N):
        out = refuses_out_of_range(ctx, table, [0, bad, last], f"n² = {N * N}")
        if out is not None:
            ctx.assert_equal(out[0], table[0], "row of position 0")
            ctx.assert_close(out[2], q_last, f"row of position {last}", scale=scale)

    # valid positions beyond n must not be refused (a bound of n instead of n²)
    inside = np.array([N, last, N + 1])
    out = ctx.run({"positions": inside, "table": table})
    if np.isnan(out).any():
        raise CheckFailure(f"positions {inside.tolist()} (inside [0, {N * N})) gave NaN rows")

    clipped = ctx.run({"positions": np.array([-3, N * N, 10 * N * N, last, 0]), "table": table},
                      out_of_range="clip")
    ctx.assert_equal(clipped[[0, 4]], table[[0, 0]], "clip: rows of -3 and 0 are p_0")
    ctx.assert_equal(clipped[[1, 2]], clipped[[3, 3]], f"clip: rows of n² and 10·n² are row {last}")
    ctx.assert_close(clipped[3], q_last, f"clip: row of position {last}", scale=scale)
