"""Properties of multimodal RoPE (Qwen2-VL M-RoPE, Qwen3-VL interleaved)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ..context import Context
from . import register
from .rope import check_logit_unchanged

DIM = 16  # 8 frequencies
SEEDS = st.integers(0, 2**32 - 1)


def _setup(ctx: Context) -> tuple[list[int], bool, str, float]:
    """Sections for DIM (valid for the assignment under test), interleaved, layout, base."""
    interleaved = bool(ctx.params.get("interleaved", False))
    sections = [4, 2, 2] if interleaved else [2, 3, 3]
    return sections, interleaved, ctx.params.get("layout", "half"), ctx.params.get("base", 1e4)


def _axes(sections: list[int], interleaved: bool) -> np.ndarray:
    """Which position id (0 t, 1 h, 2 w) drives each of the DIM/2 frequencies."""
    j = np.arange(DIM // 2)
    if interleaved:
        return np.where((j % 3 == 1) & (j < 3 * sections[1]), 1,
                        np.where((j % 3 == 2) & (j < 3 * sections[2]), 2, 0))
    return np.repeat(np.arange(3), sections)


def _pairs(layout: str) -> tuple[np.ndarray, np.ndarray]:
    j = np.arange(DIM // 2)
    return (2 * j, 2 * j + 1) if layout == "interleaved" else (j, j + DIM // 2)


def _truth(x: np.ndarray, angles: np.ndarray, layout: str) -> np.ndarray:
    """Float64 rotation of x [..., seq, DIM] by angles [seq, DIM/2]."""
    a, b = _pairs(layout)
    out = x.copy()
    cos, sin = np.cos(angles), np.sin(angles)
    out[..., a] = x[..., a] * cos - x[..., b] * sin
    out[..., b] = x[..., b] * cos + x[..., a] * sin
    return out


def _theta(base: float) -> np.ndarray:
    return base ** (-2.0 * np.arange(DIM // 2) / DIM)


@register("mrope_equal_axes_is_rope")
def equal_axes_is_rope(ctx: Context) -> None:
    """With t = h = w the result is 1-D RoPE of x (float64 truth computed here): mrope changes
    which position id drives a frequency, never the frequency."""
    sections, _, layout, base = _setup(ctx)

    @ctx.given(seed=SEEDS, top=st.sampled_from([64, 2**17, 2**22]))
    def check(seed: int, top: int) -> None:
        x = ctx.normal((2, 6, DIM), seed)
        m = np.random.default_rng(seed).integers(0, top, size=6)
        out = ctx.run({"x": x, "positions": np.stack([m, m, m])}, sections=sections)
        truth = _truth(x, m[:, None] * _theta(base), layout)
        ctx.assert_close(out, truth, f"mrope with t = h = w (positions < {top}) vs rope",
                         scale=float(np.abs(x).max()), angle_bound=float(m.max()))


@register("mrope_relative_invariance")
def relative_invariance(ctx: Context) -> None:
    """<R(p) q, R(p') k> depends on p - p' only: the same (t, h, w) shift of both changes nothing.

    args: max_shift (default 100000)."""
    sections, _, _, _ = _setup(ctx)
    max_shift = int(ctx.args.get("max_shift", 100_000))
    vec = st.lists(st.integers(0, 512), min_size=3, max_size=3)
    shifts = st.lists(st.one_of(st.integers(0, 1024), st.integers(0, max_shift)),
                      min_size=3, max_size=3)

    @ctx.given(seed=SEEDS, m=vec, n=vec, shift=shifts)
    def check(seed: int, m: list[int], n: list[int], shift: list[int]) -> None:
        q, k = ctx.normal((2, DIM), seed)
        m_, n_, s = np.array(m), np.array(n), np.array(shift)
        positions = np.stack([m_, n_, m_ + s, n_ + s], axis=1)  # [3, 4]
        out = ctx.run({"x": np.stack([q, k, q, k]), "positions": positions}, sections=sections)
        check_logit_unchanged(ctx, out, q, k, float(positions.max()),
                              f"the shift {shift}: m={m}, n={n}")


@register("mrope_section_isolation")
def section_isolation(ctx: Context) -> None:
    """Changing only the h position ids changes only the features of the h frequencies (the
    others stay bit-identical), and the result is the float64 truth for the new ids."""
    sections, interleaved, layout, base = _setup(ctx)
    axes = _axes(sections, interleaved)
    a, b = _pairs(layout)
    h_features = np.concatenate([a[axes == 1], b[axes == 1]])
    others = np.setdiff1d(np.arange(DIM), h_features)

    @ctx.given(seed=SEEDS)
    def check(seed: int) -> None:
        rng = np.random.default_rng(seed)
        x = ctx.normal((2, 6, DIM), seed)
        positions = rng.integers(0, 2**16, size=(3, 6))
        moved = positions.copy()
        moved[1] = rng.integers(0, 2**16, size=6)
        before = ctx.run({"x": x, "positions": positions}, sections=sections)
        after = ctx.run({"x": x, "positions": moved}, sections=sections)
        ctx.assert_equal(after[..., others], before[..., others],
                         f"features outside the h section {h_features.tolist()}")
        angles = moved.T[:, axes] * _theta(base)  # [seq, DIM/2]: each frequency's own id
        ctx.assert_close(after, _truth(x, angles, layout), "mrope after moving h",
                         scale=float(np.abs(x).max()), angle_bound=float(moved.max()))
