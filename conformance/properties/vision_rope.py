"""Properties of the 2-D vision rope variants beside axial_rope: Pixtral (one ladder, rows on
the even rungs, columns on the odd ones) and Llama 4 vision (1-based coordinates, the CLS
token unrotated)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ..context import CheckFailure, Context
from . import register
from .rope import check_logit_unchanged

DIM = 16
SEEDS = st.integers(0, 2**31)


def _base(ctx: Context) -> float:
    return float(ctx.params.get("base", 10000.0))


def _rotate64(x: np.ndarray, angles: np.ndarray, layout: str) -> np.ndarray:
    """Float64 rotation of x [..., seq, d] by angles [seq, d/2] in a layout."""
    d = x.shape[-1]
    j = np.arange(d // 2)
    a, b = (j, j + d // 2) if layout == "half" else (2 * j, 2 * j + 1)
    cos, sin = np.cos(angles), np.sin(angles)
    out = x.copy()
    out[..., a] = x[..., a] * cos - x[..., b] * sin
    out[..., b] = x[..., b] * cos + x[..., a] * sin
    return out


def axial_truth(x: np.ndarray, grid: np.ndarray, base: float) -> np.ndarray:
    """axial_rope (half layout, axes_dims [d/2, d/2]): each axis base^(-4i/d)."""
    d = x.shape[-1]
    theta = base ** (-4.0 * np.arange(d // 4) / d)
    angles = np.concatenate([grid[:, :1] * theta, grid[:, 1:] * theta], axis=1)
    return _rotate64(x, angles, "half")


def pixtral_truth(x: np.ndarray, grid: np.ndarray, base: float) -> np.ndarray:
    d = x.shape[-1]
    ladder = base ** (-2.0 * np.arange(d // 2) / d)
    angles = np.concatenate([grid[:, :1] * ladder[0::2], grid[:, 1:] * ladder[1::2]], axis=1)
    return _rotate64(x, angles, "half")


@register("pixtral_rows_match_axial")
def rows_match_axial(ctx: Context) -> None:
    """In column 0, Pixtral is axial_rope with axes_dims [d/2, d/2] (float64 truth computed
    here): the row frequencies base^(-4i/d) are the even rungs of the ladder."""
    base = _base(ctx)

    @ctx.given(seed=SEEDS, top=st.sampled_from([64, 2**16]))
    def check(seed: int, top: int) -> None:
        x = ctx.normal((2, 5, DIM), seed)
        grid = np.zeros((5, 2), np.int64)
        grid[:, 0] = np.random.default_rng(seed).integers(0, top, size=5)
        out = ctx.run({"x": x, "positions": grid})
        ctx.assert_close(out, axial_truth(x, grid, base), "column 0 vs axial_rope",
                         scale=float(np.abs(x).max()), angle_bound=float(grid.max()))


@register("pixtral_columns_differ_from_axial")
def columns_differ_from_axial(ctx: Context) -> None:
    """In row 0, the columns rotate by the odd rungs base^(-(4i+2)/d) (float64 truth computed
    here), which axial_rope's base^(-4i/d) does not match."""
    base = _base(ctx)

    @ctx.given(seed=SEEDS)
    def check(seed: int) -> None:
        x = ctx.normal((2, 5, DIM), seed)
        grid = np.zeros((5, 2), np.int64)
        grid[:, 1] = np.arange(1, 6) * 3
        out = ctx.run({"x": x, "positions": grid})
        scale = float(np.abs(x).max())
        ctx.assert_close(out, pixtral_truth(x, grid, base), "row 0 vs the odd rungs",
                         scale=scale, angle_bound=float(grid.max()))
        gap = np.abs(out - axial_truth(x, grid, base)).max() / scale
        if gap < max(1e-3, 4 * ctx.tol.rtol):
            raise CheckFailure(f"row 0 matches axial_rope's column frequencies (relative gap "
                               f"{gap:.3e}): Pixtral's columns take the odd rungs")


@register("pixtral_flat_ids_equal_coordinates")
def flat_ids_equal_coordinates(ctx: Context) -> None:
    """Flat ids row·W + column with max_width W give the (row, column) result bit for bit."""

    @ctx.given(seed=SEEDS, width=st.integers(1, 128))
    def check(seed: int, width: int) -> None:
        x = ctx.normal((6, DIM), seed)
        rng = np.random.default_rng(seed)
        grid = np.stack([rng.integers(0, 128, 6), rng.integers(0, width, 6)], axis=1)
        by_grid = ctx.run({"x": x, "positions": grid})
        by_ids = ctx.run({"x": x, "positions": grid[:, 0] * width + grid[:, 1]},
                         max_width=width)
        ctx.assert_equal(by_ids, by_grid, f"flat ids with max_width {width}")


@register("vision_relative_invariance")
def relative_invariance(ctx: Context) -> None:
    """Shifting the (row, column) of q and k by the same vector leaves <q, k> unchanged."""
    vec = st.lists(st.integers(0, 256), min_size=2, max_size=2)

    @ctx.given(seed=SEEDS, m=vec, n=vec, shift=st.lists(st.integers(0, 5000), min_size=2,
                                                          max_size=2))
    def check(seed: int, m: list[int], n: list[int], shift: list[int]) -> None:
        q, k = ctx.normal((2, DIM), seed)
        m_, n_, s = np.array(m), np.array(n), np.array(shift)
        positions = np.stack([m_, n_, m_ + s, n_ + s])
        out = ctx.run({"x": np.stack([q, k, q, k]), "positions": positions})
        check_logit_unchanged(ctx, out, q, k, float(positions.max()),
                              f"the grid shift {shift}: m={m}, n={n}")


def llama4_truth(x: np.ndarray, grid: np.ndarray, base: float) -> np.ndarray:
    """axial_rope in the interleaved layout over (column + 1, row + 1)."""
    d = x.shape[-1]
    theta = base ** (-4.0 * np.arange(d // 4) / d)
    angles = np.concatenate([(grid[:, 1:] + 1) * theta, (grid[:, :1] + 1) * theta], axis=1)
    return _rotate64(x, angles, "interleaved")


@register("llama4_vision_is_shifted_axial")
def is_shifted_axial(ctx: Context) -> None:
    """Llama 4 vision is axial rope (interleaved, column first) over coordinates + 1 (float64
    truth computed here); the patch at (0, 0) is rotated, where axial_rope leaves it as is."""
    base = _base(ctx)

    @ctx.given(seed=SEEDS, top=st.sampled_from([24, 2**14]))
    def check(seed: int, top: int) -> None:
        x = ctx.normal((2, 5, DIM), seed)
        grid = np.random.default_rng(seed).integers(0, top, size=(5, 2))
        grid[0] = 0
        out = ctx.run({"x": x, "positions": grid})
        ctx.assert_close(out, llama4_truth(x, grid, base), "vs axial over coordinates + 1",
                         scale=float(np.abs(x).max()), angle_bound=float(grid.max() + 1))
        if np.abs(out[..., 0, :] - x[..., 0, :]).max() < 1e-3 * float(np.abs(x).max()):
            raise CheckFailure("the patch at (0, 0) is not rotated: coordinates count from 0")


@register("llama4_vision_cls_unrotated")
def cls_unrotated(ctx: Context) -> None:
    """A token with negative coordinates (CLS) comes out as it went in, bit for bit, wherever
    it sits in the sequence; the patches beside it are unaffected by it."""
    base = _base(ctx)

    @ctx.given(seed=SEEDS, where=st.integers(0, 4), marker=st.sampled_from([-1, -2]))
    def check(seed: int, where: int, marker: int) -> None:
        x = ctx.normal((5, DIM), seed)
        grid = np.random.default_rng(seed).integers(0, 24, size=(5, 2))
        grid[where] = marker
        out = ctx.run({"x": x, "positions": grid})
        ctx.assert_equal(out[where], x[where], f"the CLS token at index {where}")
        rest = np.arange(5) != where
        ctx.assert_close(out[rest], llama4_truth(x[rest], grid[rest], base), "the patches",
                         scale=float(np.abs(x).max()), angle_bound=25.0)
