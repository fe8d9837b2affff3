"""Properties of the q/k weight permutation between interleaved and half rotary layouts."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ..context import CheckFailure, Context
from . import register

HIDDEN, SEQ = 12, 5


def _rotate(x: np.ndarray, positions: np.ndarray, rotary_dim: int, offset: int,
            layout: str, base: float = 10000.0) -> np.ndarray:
    """A float64 rope of x [..., seq, d] over features offset..offset+rotary_dim."""
    half = rotary_dim // 2
    theta = base ** (-2.0 * np.arange(half) / rotary_dim)
    angle = positions[:, None] * theta
    cos, sin = np.cos(angle), np.sin(angle)
    if layout == "interleaved":
        a, b = offset + 2 * np.arange(half), offset + 2 * np.arange(half) + 1
    else:
        a, b = offset + np.arange(half), offset + half + np.arange(half)
    out = x.copy()
    out[..., a] = x[..., a] * cos - x[..., b] * sin
    out[..., b] = x[..., b] * cos + x[..., a] * sin
    return out


def _heads(w: np.ndarray, x: np.ndarray, n_heads: int) -> np.ndarray:
    """x [seq, hidden] through w [n_heads*d, hidden] -> [n_heads, seq, d]."""
    y = x @ w.T
    return np.transpose(y.reshape(y.shape[0], n_heads, -1), (1, 0, 2))


def _logits(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    group = q.shape[0] // k.shape[0]  # GQA: query head h reads key head h // group
    return np.einsum("hsd,htd->hst", q, np.repeat(k, group, axis=0))


@register("qk_permutation_logits_agree")
def logits_agree(ctx: Context) -> None:
    """A half rope on the permuted (to='half') q and k weights gives the logits an interleaved
    rope gives on the originals, with GQA, partial rotary and DeepSeek's trailing rope slice;
    the rotated q, k and the cached K differ, and permuting the interleaved cache (axis -1,
    one head) gives the half one."""
    configs = [  # (n_q, n_kv, head_dim, rotary_dim, rope_slice)
        (4, 2, 8, 8, "first"), (2, 1, 10, 4, "first"), (2, 2, 14, 8, "last"),
        (3, 3, 6, 6, "first")]
    for n_q, n_kv, head_dim, rotary_dim, where in configs:
        seed = 31 * n_q + head_dim
        wq = ctx.normal((n_q * head_dim, HIDDEN), seed)
        wk = ctx.normal((n_kv * head_dim, HIDDEN), seed + 1)
        x = ctx.normal((SEQ, HIDDEN), seed + 2)
        positions = np.array([0, 1, 7, 100, 4095], dtype=np.float64)
        offset = 0 if where == "first" else head_dim - rotary_dim
        params = {"rotary_dim": rotary_dim, "rope_slice": where}
        wq_half = ctx.run({"w": wq}, n_heads=n_q, **params)
        wk_half = ctx.run({"w": wk}, n_heads=n_kv, **params)
        what = f"n_heads {n_q}/{n_kv}, head_dim {head_dim}, rotary_dim {rotary_dim} ({where})"
        q_meta = _rotate(_heads(wq, x, n_q), positions, rotary_dim, offset, "interleaved")
        k_meta = _rotate(_heads(wk, x, n_kv), positions, rotary_dim, offset, "interleaved")
        q_hf = _rotate(_heads(wq_half, x, n_q), positions, rotary_dim, offset, "half")
        k_hf = _rotate(_heads(wk_half, x, n_kv), positions, rotary_dim, offset, "half")
        expected = _logits(q_meta, k_meta)
        ctx.assert_close(_logits(q_hf, k_hf), expected, f"logits, {what}",
                         scale=float(np.abs(expected).max()), tol=ctx.tol.loosened(4))
        for name, a, b in (("q", q_hf, q_meta), ("cached K", k_hf, k_meta)):
            if np.allclose(a, b):
                raise CheckFailure(f"{name} equal across the pair, {what}: the permutation did "
                                   "not move the rotary rows")
        converted = ctx.run({"w": k_meta}, n_heads=1, axis=-1, **params)
        ctx.assert_close(converted, k_hf, f"interleaved cached K permuted to half, {what}",
                         scale=float(np.abs(k_hf).max()), tol=ctx.tol.loosened(4))


_shapes = st.tuples(st.integers(1, 4), st.integers(1, 6), st.integers(0, 3),
                    st.sampled_from(["first", "last"]))


def _config(n_heads: int, pairs: int, extra: int) -> tuple[int, int]:
    return 2 * pairs + extra, 2 * pairs  # (head_dim, rotary_dim)


@register("qk_permutation_inverse")
def inverse(ctx: Context) -> None:
    """to='interleaved' undoes to='half' and the other way round, bit for bit."""

    @ctx.given(shape=_shapes, seed=st.integers(0, 10**6))
    def check(shape: tuple[int, int, int, str], seed: int) -> None:
        n_heads, pairs, extra, where = shape
        head_dim, rotary_dim = _config(n_heads, pairs, extra)
        w = ctx.normal((n_heads * head_dim, 3), seed)
        params = {"n_heads": n_heads, "rotary_dim": rotary_dim, "rope_slice": where}
        for first, second in (("half", "interleaved"), ("interleaved", "half")):
            there = ctx.run({"w": w}, to=first, **params)
            back = ctx.run({"w": there}, to=second, **params)
            ctx.assert_equal(back, w, f"to={second!r} after to={first!r}, {params}")


@register("qk_permutation_not_involution")
def not_involution(ctx: Context) -> None:
    """Applying to='half' twice is the identity only for rotary_dim <= 4; from rotary_dim 6 on,
    a conversion run twice (a converter that permutes an already converted checkpoint)
    scrambles the rows, and to='half' differs from to='interleaved'."""
    for rotary_dim in (2, 4, 6, 8, 64):
        w = np.arange(2 * rotary_dim, dtype=np.float64)[:, None] * np.ones((1, 2)) / 64
        twice = ctx.run({"w": ctx.run({"w": w}, n_heads=2)}, n_heads=2)
        other = ctx.run({"w": w}, n_heads=2, to="interleaved")
        once = ctx.run({"w": w}, n_heads=2)
        if rotary_dim <= 4:
            ctx.assert_equal(twice, w, f"to='half' twice, rotary_dim {rotary_dim}")
            ctx.assert_equal(other, once, f"to='half' vs 'interleaved', rotary_dim {rotary_dim}")
        elif np.array_equal(twice, w) or np.array_equal(other, once):
            raise CheckFailure(f"rotary_dim {rotary_dim}: to='half' applied twice is the "
                               "identity or equals to='interleaved'; it must be neither")


@register("qk_permutation_moves_only_rotary_rows")
def moves_only_rotary_rows(ctx: Context) -> None:
    """Rows outside each head's rotary slice stay put; the rotary rows of a head are a
    permutation of that head's rotary rows (nothing crosses heads), evens first for to='half'."""

    @ctx.given(shape=_shapes)
    def check(shape: tuple[int, int, int, str]) -> None:
        n_heads, pairs, extra, where = shape
        head_dim, rotary_dim = _config(n_heads, pairs, extra)
        rows = np.arange(n_heads * head_dim, dtype=np.float64)
        w = rows[:, None] * np.ones((1, 2)) / 64  # row k holds k/64: exact in every dtype
        out = ctx.run({"w": w}, n_heads=n_heads, rotary_dim=rotary_dim, rope_slice=where)
        source = np.round(out[:, 0] * 64).astype(int)
        offset = 0 if where == "first" else head_dim - rotary_dim
        for h in range(n_heads):
            start = h * head_dim + offset
            rotary = np.arange(start, start + rotary_dim)
            expected = np.concatenate([rotary[0::2], rotary[1::2]])
            ctx.assert_equal(source[rotary], expected, f"head {h} rotary rows, {shape}")
        fixed = np.ones(n_heads * head_dim, dtype=bool)
        for h in range(n_heads):
            fixed[h * head_dim + offset: h * head_dim + offset + rotary_dim] = False
        ctx.assert_equal(source[fixed], rows[fixed].astype(int), f"non-rotary rows, {shape}")
