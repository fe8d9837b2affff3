"""Properties of xPos (rotary embedding with per-pair scales zeta_i ** (±(n - c) / scale_base)).

Every check keeps array shapes and encoding parameters to a few fixed values per property (a
new value is a recompilation in compiled mode) and draws positions within a few ``scale_base``
of the centre, so the factors stay within [1/150, 150] and finite in float16.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from ..context import CheckFailure, Context
from . import register

DIM = 16
SEEDS = st.integers(0, 2**32 - 1)


def _params(ctx: Context) -> dict[str, Any]:
    """The effective encoding parameters of this check (spec defaults, then property params)."""
    return {**ctx.spec.defaults(), **ctx.params}


def _zeta(rotary_dim: int) -> np.ndarray:
    return (2.0 * np.arange(rotary_dim // 2) / rotary_dim + 0.4) / 1.4


def _pair_index(rotary_dim: int, layout: str) -> tuple[np.ndarray, np.ndarray]:
    half = rotary_dim // 2
    if layout == "interleaved":
        return np.arange(0, rotary_dim, 2), np.arange(1, rotary_dim, 2)
    return np.arange(half), np.arange(half, rotary_dim)


def _power(kind: str, positions: np.ndarray, centre: float, scale_base: float) -> np.ndarray:
    """Exponent of zeta per position, ``[..., 1]``."""
    sign = 1.0 if kind == "query" else -1.0
    return (sign * (np.asarray(positions, np.float64) - centre) / scale_base)[..., None]


def expected_xpos(x: np.ndarray, positions: np.ndarray, *, kind: str, scale_base: float,
                  centre: float, base: float, layout: str, rotary_dim: int | None) -> np.ndarray:
    """The formula in float64 NumPy (positions ``[seq]``), independent of the implementation."""
    rd = x.shape[-1] if rotary_dim is None else rotary_dim
    a, b = _pair_index(rd, layout)
    angles = np.asarray(positions, np.float64)[:, None] * base ** (-2.0 * np.arange(rd // 2) / rd)
    factor = _zeta(rd) ** _power(kind, positions, centre, scale_base)
    cos, sin = np.cos(angles) * factor, np.sin(angles) * factor
    out = np.array(x, dtype=np.float64)
    out[..., a] = x[..., a] * cos - x[..., b] * sin
    out[..., b] = x[..., b] * cos + x[..., a] * sin
    return out


def _relative(ctx: Context, max_position: float) -> float:
    """Relative error allowed per output row: output rounding, the factor's exp and (where the
    spec allows one) the float angle error at the largest position (theta_0 = 1)."""
    t = ctx.tol
    return t.rtol + t.atol + t.angle * t.compute_eps * max_position


def _check_logits(ctx: Context, what: str, before: np.ndarray, after: np.ndarray,
                  allowed: np.ndarray, details: str) -> None:
    excess = np.abs(after - before) - allowed
    if np.any(excess > 0):
        i = np.unravel_index(int(np.argmax(excess)), excess.shape)
        diff = float(abs(after[i] - before[i]))
        raise CheckFailure(
            f"{what} ({details}): logit {tuple(int(v) for v in i)} {before[i]:.9g} -> "
            f"{after[i]:.9g} (difference {diff:.3e} > tolerance {float(allowed[i]):.3e})",
            {"max_abs": float(np.max(np.abs(after - before))), "tolerance": float(allowed[i]),
             "worst_index": [int(v) for v in i]})


def _norms(a: np.ndarray) -> np.ndarray:
    return np.linalg.norm(a, axis=-1)


@register("xpos_centre_independence")
def centre_independence(ctx: Context) -> None:
    """<xpos_q(q, m; c), xpos_k(k, n; c)> is the same for every centre c.

    args: centres (two, default [0.0, 1000.5]); positions are drawn within 3 * scale_base of
    both centres. A backend that ignores the centre on one side only fails it."""
    p = _params(ctx)
    sb = float(p["scale_base"])
    c1, c2 = (float(c) for c in ctx.args.get("centres", [0.0, 1000.5]))
    lo, hi = int(np.ceil(max(c1, c2) - 3 * sb)), int(np.floor(min(c1, c2) + 3 * sb))
    if lo > hi:
        raise ValueError(f"centres {c1}, {c2} are more than 6 * scale_base = {6 * sb} apart")

    @ctx.given(seed=SEEDS)
    def check(seed: int) -> None:
        rng = np.random.default_rng(seed)
        q, k = ctx.normal((4, DIM), seed), ctx.normal((5, DIM), seed + 1)
        m, n = ctx.draw_positions(rng, lo, hi, 4), ctx.draw_positions(rng, lo, hi, 5)
        logits, allowed = [], 0.0
        for c in (c1, c2):
            qo = ctx.run({"x": q, "positions": m}, kind="query", centre=c)
            ko = ctx.run({"x": k, "positions": n}, kind="key", centre=c)
            logits.append(qo @ ko.T)
            bound = 4 * _relative(ctx, float(max(np.abs(m).max(), np.abs(n).max())))
            allowed = allowed + bound * np.outer(_norms(qo), _norms(ko))
        _check_logits(ctx, "<xpos_q, xpos_k> changed with the centre", logits[0], logits[1],
                      allowed, f"centres {c1} and {c2}, m={m.tolist()}, n={n.tolist()}")


@register("xpos_relative_invariance")
def relative_invariance(ctx: Context) -> None:
    """<xpos_q(q, m), xpos_k(k, n)> depends on m - n only: shifting both by s changes nothing.

    Positions m, n lie within scale_base of the centre and s within max_shift (args, default
    scale_base), so every factor stays within zeta_0 ** ±(1 + max_shift / scale_base)."""
    p = _params(ctx)
    sb, c = float(p["scale_base"]), float(p["centre"])
    max_shift = int(ctx.args.get("max_shift", sb))
    lo, hi = int(np.ceil(c - sb)), int(np.floor(c + sb))

    @ctx.given(seed=SEEDS, shift=st.one_of(st.integers(-64, 64),
                                          st.integers(-max_shift, max_shift)))
    def check(seed: int, shift: int) -> None:
        rng = np.random.default_rng(seed)
        q, k = ctx.normal((4, DIM), seed), ctx.normal((4, DIM), seed + 1)
        low = max(lo, 0) if ctx.negative_positions_refused() and hi >= 0 else lo
        m, n = rng.integers(low, hi + 1, size=4), rng.integers(low, hi + 1, size=4)
        if low >= 0:  # an offset that may not be negative: m + s, n + s >= 0 too
            shift = max(shift, -int(min(m.min(), n.min())))
        qo = ctx.run({"x": np.concatenate([q, q]), "positions": np.concatenate([m, m + shift])},
                     kind="query")
        ko = ctx.run({"x": np.concatenate([k, k]), "positions": np.concatenate([n, n + shift])},
                     kind="key")
        before, after = qo[:4] @ ko[:4].T, qo[4:] @ ko[4:].T
        bound = 4 * _relative(ctx, float(max(np.abs(m).max(), np.abs(n).max()) + abs(shift)))
        allowed = bound * (np.outer(_norms(qo[:4]), _norms(ko[:4]))
                           + np.outer(_norms(qo[4:]), _norms(ko[4:])))
        _check_logits(ctx, "<xpos_q(m), xpos_k(n)> changed under a shift", before, after,
                      allowed, f"centre {c}, shift {shift}, m={m.tolist()}, n={n.tolist()}")


@register("xpos_is_scaled_rope")
def is_scaled_rope(ctx: Context) -> None:
    """Each rotated pair equals the RoPE rotation of x's pair by n * theta_i times
    zeta_i ** (±(n - c) / scale_base) (float64 NumPy formula); in particular every pair's norm
    is |x pair| times that factor, and features past rotary_dim pass through unchanged."""
    p = _params(ctx)
    sb, c = float(p["scale_base"]), float(p["centre"])
    dim = DIM + 4 if p.get("rotary_dim") is not None else DIM
    rd = dim if p.get("rotary_dim") is None else int(p["rotary_dim"])
    a, b = _pair_index(rd, p["layout"])
    lo, hi = int(np.ceil(c - 3 * sb)), int(np.floor(c + 3 * sb))

    @ctx.given(seed=SEEDS, kind=st.sampled_from(["query", "key"]))
    def check(seed: int, kind: str) -> None:
        x = ctx.normal((3, 6, dim), seed)
        positions = ctx.draw_positions(np.random.default_rng(seed), lo, hi, 6)
        out = ctx.run({"x": x, "positions": positions}, kind=kind)
        expected = expected_xpos(x, positions, **{**p, "kind": kind})
        bound = float(np.abs(positions).max())
        ctx.assert_close(out, expected, f"xpos({kind}) vs rope(x) * zeta ** power",
                         scale=float(np.abs(expected).max()), angle_bound=bound,
                         tol=ctx.tol.loosened(2))
        factor = _zeta(rd) ** _power(kind, positions, c, sb)
        pair_x = np.hypot(x[..., a], x[..., b])
        ctx.assert_close(np.hypot(out[..., a], out[..., b]), pair_x * factor,
                         "pair norms vs |x pair| * zeta ** power",
                         scale=float(np.max(pair_x * factor)), tol=ctx.tol.loosened(2))
        if rd < dim:
            ctx.assert_equal(out[..., rd:], x[..., rd:], "pass-through features")


@register("xpos_key_query_inverse")
def key_query_inverse(ctx: Context) -> None:
    """Keys carry the reciprocal scale of queries: at the same position and centre, pair i of
    xpos_q(x) equals zeta_i ** (2 (n - c) / scale_base) times pair i of xpos_k(x), and
    |q pair| |k pair| = |x pair|^2. A backend that gives keys the query's sign fails it."""
    p = _params(ctx)
    sb, c = float(p["scale_base"]), float(p["centre"])
    rd = DIM
    a, b = _pair_index(rd, p["layout"])
    lo, hi = int(np.ceil(c - 2 * sb)), int(np.floor(c + 2 * sb))

    @ctx.given(seed=SEEDS)
    def check(seed: int) -> None:
        x = ctx.normal((2, 5, DIM), seed)
        positions = ctx.draw_positions(np.random.default_rng(seed), lo, hi, 5)
        qo = ctx.run({"x": x, "positions": positions}, kind="query")
        ko = ctx.run({"x": x, "positions": positions}, kind="key")
        ratio = _zeta(rd) ** _power("query", positions, c, sb / 2)
        scaled = np.empty_like(ko)
        scaled[..., a], scaled[..., b] = ko[..., a] * ratio, ko[..., b] * ratio
        ctx.assert_close(qo, scaled, "xpos_q vs zeta ** (2 (n - c) / scale_base) * xpos_k",
                         scale=float(np.abs(qo).max()), tol=ctx.tol.loosened(3))
        product = np.hypot(qo[..., a], qo[..., b]) * np.hypot(ko[..., a], ko[..., b])
        squared = x[..., a] ** 2 + x[..., b] ** 2
        ctx.assert_close(product, squared, "|q pair| |k pair| vs |x pair|^2",
                         scale=float(squared.max()), tol=ctx.tol.loosened(3))


@register("xpos_decode_offset")
def decode_offset(ctx: Context) -> None:
    """Decoding one token at position t with the sequence's centre (KV cache) equals row t of
    the full-sequence result. One centre, 2056, serves both starts (0 and 4096) so that each
    kind compiles once; with scale_base >= 512 the factors stay within 3.5 ** ±4.1."""
    length, centre = 16, 2056.0

    @ctx.given(seed=SEEDS, t=st.integers(0, length - 1), start=st.sampled_from([0, 4096]),
               kind=st.sampled_from(["query", "key"]))
    def check(seed: int, t: int, start: int, kind: str) -> None:
        x = ctx.normal((2, length, DIM), seed)
        full = ctx.run({"x": x, "positions": np.arange(start, start + length)}, kind=kind,
                       centre=centre)
        step = ctx.run({"x": np.ascontiguousarray(x[:, t : t + 1]),
                        "positions": np.array([start + t])}, kind=kind, centre=centre)
        ctx.assert_close(step[:, 0], full[:, t], f"token at offset {start + t} vs full row",
                         scale=float(np.abs(full).max()), angle_bound=float(start + length),
                         tol=ctx.tol.loosened(2))
