"""Properties of the learned table lookup."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ..context import CheckFailure, Context
from . import register

MAX_LEN, DIM = 32, 8


def rows_bit_for_bit(ctx: Context, rows: int, dim: int, what: str) -> None:
    """Positions inside a trained table of ``rows`` x ``dim`` return its rows bit for bit (the
    table encodings: learned, hierarchical's first block)."""

    @ctx.given(seed=st.integers(0, 2**32 - 1))
    def check(seed: int) -> None:
        table = ctx.normal((rows, dim), seed)
        positions = np.random.default_rng(seed).integers(0, rows, size=(3, 7))
        out = ctx.run({"positions": positions, "table": table})
        ctx.assert_equal(out, table[positions], what)


@register("learned_exact_rows")
def exact_rows(ctx: Context) -> None:
    """The lookup returns the table's rows bit-identically."""
    rows_bit_for_bit(ctx, MAX_LEN, DIM, "rows")


@register("learned_out_of_range")
def out_of_range(ctx: Context) -> None:
    """Positions outside [0, max_len) with out_of_range='error': eager calls raise an error naming
    the position; compiled calls (values unknown while tracing) fill those rows with NaN."""
    table = ctx.normal((MAX_LEN, DIM), 0)
    for bad in (MAX_LEN, -1, 10 * MAX_LEN):
        out = refuses_out_of_range(ctx, table, [0, bad, MAX_LEN - 1], f"max_len {MAX_LEN}")
        if out is not None:
            ctx.assert_equal(out[[0, 2]], table[[0, MAX_LEN - 1]], "in-range rows")


def refuses_out_of_range(ctx: Context, table: np.ndarray, positions: list[int],
                         limit: str) -> np.ndarray | None:
    """``positions[1]`` lies outside the table (``limit`` says where it ends), with
    out_of_range='error'. Eager: the call must raise an error naming 'positions' and the
    value (None is returned). Compiled (values unknown while tracing): that row must be NaN;
    the output is returned for the caller to check the in-range rows."""
    bad = positions[1]
    inputs = {"positions": np.array(positions), "table": table}
    if ctx.mode == "eager":
        try:
            out = ctx.run(inputs)
        except (IndexError, ValueError) as exc:
            if str(bad) not in str(exc) or "positions" not in str(exc):
                raise CheckFailure(
                    f"position {bad}: the error does not name 'positions' and the value: "
                    f"{exc}") from exc
            return None
        raise CheckFailure(f"position {bad} ({limit}) returned a row instead of raising: "
                           f"{out[1][:4]}…")
    out = ctx.run(inputs)
    if not np.all(np.isnan(out[1])):
        raise CheckFailure(f"compiled: row of position {bad} is {out[1][:4]}…, not NaN")
    return out
