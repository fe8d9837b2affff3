"""Properties of axial RoPE over grids."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ..context import Context
from . import register
from .rope import check_logit_unchanged

DIM = 16
DIMS_3D = [4, 6, 6]  # (t, row, col) widths of DIM
SEEDS = st.integers(0, 2**32 - 1)


def _layout(ctx: Context) -> str:
    return ctx.params.get("layout", "half")


def _base(ctx: Context) -> float:
    return float(ctx.params.get("base", 10000.0))


def _rope64(x: np.ndarray, positions: np.ndarray, width: int, base: float,
            layout: str) -> np.ndarray:
    """Float64 1-D RoPE of x [..., seq, width] (all features rotated)."""
    i = np.arange(width // 2)
    a, b = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + width // 2)
    angles = positions[:, None] * base ** (-2.0 * i / width)
    cos, sin = np.cos(angles), np.sin(angles)
    out = x.copy()
    out[..., a] = x[..., a] * cos - x[..., b] * sin
    out[..., b] = x[..., b] * cos + x[..., a] * sin
    return out


def axis_features(dims: list[int], axis: int, layout: str) -> np.ndarray:
    """The features axis ``axis`` rotates, ordered so that they form a 1-D RoPE input of width
    dims[axis] in the same layout."""
    r, start = sum(dims), sum(dims[:axis])
    if layout == "interleaved":
        return np.arange(start, start + dims[axis])
    first = start // 2 + np.arange(dims[axis] // 2)
    return np.concatenate([first, first + r // 2])


@register("axial_one_row_is_rope")
def one_row_is_rope(ctx: Context) -> None:
    """On a 1-row grid (every coordinate but axis a's zero) the features of axis a are 1-D RoPE
    of width d_a with base^(-2i/d_a) (float64 truth computed here) and the others are x,
    bit for bit."""
    layout, base = _layout(ctx), _base(ctx)

    @ctx.given(seed=SEEDS, axis=st.integers(0, 2), top=st.sampled_from([64, 2**17, 2**22]))
    def check(seed: int, axis: int, top: int) -> None:
        x = ctx.normal((2, 6, DIM), seed)
        coords = np.random.default_rng(seed).integers(0, top, size=6)
        positions = np.zeros((6, 3), np.int64)
        positions[:, axis] = coords
        out = ctx.run({"x": x, "positions": positions}, axes_dims=DIMS_3D)
        own = axis_features(DIMS_3D, axis, layout)
        rest = np.setdiff1d(np.arange(DIM), own)
        ctx.assert_equal(out[..., rest], x[..., rest], f"features of the axes other than {axis}")
        truth = _rope64(x[..., own], coords, DIMS_3D[axis], base, layout)
        ctx.assert_close(out[..., own], truth, f"features of axis {axis} vs 1-D rope",
                         scale=float(np.abs(x).max()), angle_bound=float(coords.max()))


@register("axial_relative_invariance")
def relative_invariance(ctx: Context) -> None:
    """Shifting the grid coordinates of q and k by the same vector leaves <q, k> unchanged.

    args: max_shift (default 100000)."""
    max_shift = int(ctx.args.get("max_shift", 100_000))
    vec = st.lists(st.integers(0, 512), min_size=3, max_size=3)
    shifts = st.lists(st.one_of(st.integers(0, 1024), st.integers(0, max_shift)),
                      min_size=3, max_size=3)

    @ctx.given(seed=SEEDS, m=vec, n=vec, shift=shifts)
    def check(seed: int, m: list[int], n: list[int], shift: list[int]) -> None:
        q, k = ctx.normal((2, DIM), seed)
        m_, n_, s = np.array(m), np.array(n), np.array(shift)
        positions = np.stack([m_, n_, m_ + s, n_ + s])  # [4, 3]
        out = ctx.run({"x": np.stack([q, k, q, k]), "positions": positions},
                      axes_dims=DIMS_3D)
        check_logit_unchanged(ctx, out, q, k, float(positions.max()),
                              f"the grid shift {shift}: m={m}, n={n}")


@register("axial_single_axis_equals_rope")
def single_axis_equals_rope(ctx: Context) -> None:
    """With one axis, axial RoPE is 1-D RoPE (float64 truth computed here); axes_dims = [r] < dim
    rotates the first r features and passes the rest through bit for bit."""
    layout, base = _layout(ctx), _base(ctx)

    @ctx.given(seed=SEEDS, width=st.sampled_from([None, 8]), top=st.sampled_from([64, 2**20]))
    def check(seed: int, width: int | None, top: int) -> None:
        x = ctx.normal((2, 5, DIM), seed)
        m = np.random.default_rng(seed).integers(-top, top, size=5)
        r = DIM if width is None else width
        out = ctx.run({"x": x, "positions": m[:, None]},
                      axes_dims=None if width is None else [width])
        ctx.assert_equal(out[..., r:], x[..., r:], "pass-through features")
        ctx.assert_close(out[..., :r], _rope64(x[..., :r], m, r, base, layout),
                         "one-axis axial rope vs 1-D rope", scale=float(np.abs(x).max()),
                         angle_bound=float(np.abs(m).max()))


@register("axial_layout_permutation")
def layout_permutation(ctx: Context) -> None:
    """interleaved(x) = P⁻¹ half(P x), P the channel permutation (2j, 2j+1) ↔ (j, j + r/2): the
    half layout pairs frequency j's features across the whole rotary width, as rope does."""
    perm = np.concatenate([np.arange(0, DIM, 2), np.arange(1, DIM, 2)])
    inverse = np.argsort(perm)

    @ctx.given(seed=SEEDS)
    def check(seed: int) -> None:
        x = ctx.normal((2, 6, DIM), seed)
        positions = np.random.default_rng(seed).integers(0, 4096, size=(6, 3))
        inter = ctx.run({"x": x, "positions": positions}, axes_dims=DIMS_3D,
                        layout="interleaved")
        half = ctx.run({"x": x[..., perm], "positions": positions}, axes_dims=DIMS_3D,
                       layout="half")[..., inverse]
        ctx.assert_close(half, inter, "P⁻¹ half(P x) vs interleaved(x)",
                         scale=float(np.abs(x).max()), angle_bound=float(positions.max()),
                         tol=ctx.tol.loosened(2))
