"""Properties of multimodal RoPE (Qwen2-VL M-RoPE, Qwen3-VL interleaved, ERNIE 4.5-VL, Bailing,
HunYuan XD-RoPE)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ..context import Context
from . import register
from .rope import check_logit_unchanged

DIM = 16  # 8 frequencies
SEEDS = st.integers(0, 2**32 - 1)


# sections for DIM under each ordering, in the config's order (ERNIE [h, w, t]; XD-RoPE 4 rows)
_SECTIONS = {"contiguous": [2, 3, 3], "interleaved": [4, 2, 2], "ernie": [3, 3, 2],
             "bailing": [2, 3, 3], "xdrope": [2, 2, 2, 2]}


def _setup(ctx: Context) -> tuple[list[int], str, str, float]:
    """Sections for DIM (valid for the ordering under test), ordering, layout, base."""
    ordering = ctx.params.get("ordering") or (
        "interleaved" if ctx.params.get("interleaved", False) else "contiguous")
    return (_SECTIONS[ordering], ordering, ctx.params.get("layout", "half"),
            ctx.params.get("base", 1e4))


def _rows(sections: list[int], ordering: str) -> tuple[np.ndarray, np.ndarray]:
    """The position-id row driving the first and the second feature of each DIM/2 pair."""
    j = np.arange(DIM // 2)
    if ordering == "interleaved":
        row = np.where((j % 3 == 1) & (j < 3 * sections[1]), 1,
                       np.where((j % 3 == 2) & (j < 3 * sections[2]), 2, 0))
    elif ordering in ("ernie", "bailing"):
        spatial = 2 * sections[0 if ordering == "ernie" else 1]
        row = np.where(j < spatial, np.where(j % 2 == 0, 1, 2), 0)
    elif ordering == "xdrope":
        doubled = np.repeat(np.arange(len(sections)), 2 * np.array(sections))
        return doubled[: DIM // 2], doubled[DIM // 2:]
    else:
        row = np.repeat(np.arange(len(sections)), sections)
    return row, row


def _pairs(layout: str) -> tuple[np.ndarray, np.ndarray]:
    j = np.arange(DIM // 2)
    return (2 * j, 2 * j + 1) if layout == "interleaved" else (j, j + DIM // 2)


def _truth(x: np.ndarray, angles: np.ndarray, layout: str,
           angles_b: np.ndarray | None = None) -> np.ndarray:
    """Float64 rotation of x [..., seq, DIM] by angles [seq, DIM/2] (the second features by
    ``angles_b`` where they differ)."""
    a, b = _pairs(layout)
    angles_b = angles if angles_b is None else angles_b
    out = x.copy()
    out[..., a] = x[..., a] * np.cos(angles) - x[..., b] * np.sin(angles)
    out[..., b] = x[..., b] * np.cos(angles_b) + x[..., a] * np.sin(angles_b)
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
        out = ctx.run({"x": x, "positions": np.stack([m] * len(sections))}, sections=sections)
        truth = _truth(x, m[:, None] * _theta(base), layout)
        ctx.assert_close(out, truth, f"mrope with t = h = w (positions < {top}) vs rope",
                         scale=float(np.abs(x).max()), angle_bound=float(m.max()))


@register("mrope_relative_invariance")
def relative_invariance(ctx: Context) -> None:
    """<R(p) q, R(p') k> depends on p - p' only: the same (t, h, w) shift of both changes nothing.

    args: max_shift (default 100000)."""
    sections, _, _, _ = _setup(ctx)
    max_shift = int(ctx.args.get("max_shift", 100_000))
    axes = len(sections)
    vec = st.lists(st.integers(0, 512), min_size=axes, max_size=axes)
    shifts = st.lists(st.one_of(st.integers(0, 1024), st.integers(0, max_shift)),
                      min_size=axes, max_size=axes)

    @ctx.given(seed=SEEDS, m=vec, n=vec, shift=shifts)
    def check(seed: int, m: list[int], n: list[int], shift: list[int]) -> None:
        q, k = ctx.normal((2, DIM), seed)
        m_, n_, s = np.array(m), np.array(n), np.array(shift)
        positions = np.stack([m_, n_, m_ + s, n_ + s], axis=1)  # [axes, 4]
        out = ctx.run({"x": np.stack([q, k, q, k]), "positions": positions}, sections=sections)
        check_logit_unchanged(ctx, out, q, k, float(positions.max()),
                              f"the shift {shift}: m={m}, n={n}")


@register("mrope_section_isolation")
def section_isolation(ctx: Context) -> None:
    """Changing only the h position ids (row 1; width for XD-RoPE) changes only the features
    that row drives (the others stay bit-identical), and the result is the float64 truth for
    the new ids: the ordering's assignment of rows to features, checked feature by feature."""
    sections, ordering, layout, base = _setup(ctx)
    rows_a, rows_b = _rows(sections, ordering)
    a, b = _pairs(layout)
    moved_features = np.concatenate([a[rows_a == 1], b[rows_b == 1]])
    others = np.setdiff1d(np.arange(DIM), moved_features)

    @ctx.given(seed=SEEDS)
    def check(seed: int) -> None:
        rng = np.random.default_rng(seed)
        x = ctx.normal((2, 6, DIM), seed)
        positions = rng.integers(0, 2**16, size=(len(sections), 6))
        moved = positions.copy()
        moved[1] = rng.integers(0, 2**16, size=6)
        before = ctx.run({"x": x, "positions": positions}, sections=sections)
        after = ctx.run({"x": x, "positions": moved}, sections=sections)
        ctx.assert_equal(after[..., others], before[..., others],
                         f"features outside row 1's {sorted(moved_features.tolist())}")
        theta = _theta(base)  # [seq, DIM/2]: each feature's own id
        truth = _truth(x, moved.T[:, rows_a] * theta, layout, moved.T[:, rows_b] * theta)
        ctx.assert_close(after, truth, f"mrope ({ordering}) after moving row 1",
                         scale=float(np.abs(x).max()), angle_bound=float(moved.max()))
