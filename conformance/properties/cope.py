"""Properties of CoPE: positions that count the gated keys from j to the query, read through a
table interpolated between integer rows, causal and aligned to the end of the keys.

Gates are made exact by construction: q·k of ±256 (scale 1/2) gives sigmoid 1 or 0 in
float32 and to 1e-111 in float64; q ⟂ k gives 1/2. A linear table E_n = n·e_0 turns the term
into q_i[0]·p_ij, so the positions themselves can be read off the output.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from ..context import CheckFailure, Context
from . import register

BATCH, DIM = 2, 4
BIG = 16.0  # q·k = ±BIG² = ±256, times the default scale 1/sqrt(4): gates 1 or 0


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _causal(ctx: Context) -> bool:
    return bool(ctx.params.get("causal", True))


def _visible(q_len: int, k_len: int) -> np.ndarray:
    """[q_len, k_len]: key j at or before query row r's position k_len − q_len + r."""
    return np.arange(k_len)[None, :] <= (np.arange(q_len) + k_len - q_len)[:, None]


def _counting_inputs(ctx: Context, seed: int, counted: np.ndarray,
                     npos_max: int) -> dict[str, np.ndarray]:
    """Queries (BIG, random...) and keys (±BIG, 0...): key t's gate is 1 where counted[t]."""
    seq = counted.shape[-1]
    q = ctx.normal((BATCH, seq, DIM), seed)
    q[..., 0] = BIG
    k = np.zeros((BATCH, seq, DIM))
    k[..., 0] = np.where(counted, BIG, -BIG)
    return {"q": q, "k": k, "pos_emb": ctx.normal((npos_max, DIM), seed + 1)}


@register("cope_counts_gated_keys")
def counts_gated_keys(ctx: Context) -> None:
    """Gates 0 or 1: p_ij is the number of counted keys from j to the query i, clamped to
    npos_max − 1, and the term is q_i·E[p_ij] exactly (no interpolation). With every key
    counted, p_ij = i − j + 1: CoPE reduces to token-based relative positions (the paper,
    section 3). Catches a forward cumulative sum, gates of later keys counted, a missing clamp."""
    seq, npos_max = 9, 6

    def check(counted: np.ndarray, seed: int) -> None:
        inputs = _counting_inputs(ctx, seed, counted, npos_max)
        out = ctx.run(inputs, npos_max=npos_max)
        if out.shape != (BATCH, seq, seq):
            raise CheckFailure(f"shape {out.shape}, expected {(BATCH, seq, seq)}")
        gates = np.broadcast_to(counted[:, None, :], (BATCH, seq, seq)).astype(float)
        seen = _visible(seq, seq) if _causal(ctx) else np.ones((seq, seq), bool)
        gates = gates * seen
        count = np.flip(np.cumsum(np.flip(gates, -1), -1), -1).astype(np.int64)
        rows = np.minimum(count, npos_max - 1)
        per_row = inputs["q"] @ inputs["pos_emb"].T  # [batch, seq, npos_max]
        expected = np.take_along_axis(per_row, rows, axis=-1) * seen
        what = ("every key counted: the term vs q_i·E[min(i − j + 1, npos_max − 1)]"
                if counted.all() else f"keys counted {counted.astype(int).tolist()}: the term "
                "vs q_i·E[number of counted keys from j to i]")
        ctx.assert_close(out, expected, what)

    check(np.ones((BATCH, seq), bool), 11)

    @ctx.given(seed=st.integers(0, 2**31))
    def random_counts(seed: int) -> None:
        counted = np.random.default_rng(seed).random((BATCH, seq)) < 0.5
        check(counted, seed % 1000)


@register("cope_positions_from_linear_table")
def positions_from_linear_table(ctx: Context) -> None:
    """With the linear table E_n = n·e_0 the interpolated term is q_i[0]·p_ij, so the positions
    can be read off: p_ij = min(Σ_t sigmoid(q_i·k_t / sqrt(d)), npos_max − 1) over keys t from j
    to the query (to the last key when not causal), non-increasing in j and within
    [0, npos_max − 1]."""
    seq, npos_max = 10, 5
    table = np.zeros((npos_max, DIM))
    table[:, 0] = np.arange(npos_max)
    causal = _causal(ctx)
    seen = _visible(seq, seq) if causal else np.ones((seq, seq), bool)

    @ctx.given(seed=st.integers(0, 2**31))
    def check(seed: int) -> None:
        q = ctx.normal((BATCH, seq, DIM), seed % 1000)
        q[..., 0] = 1 + np.round(np.abs(q[..., 0]) * 4) / 4  # exact, in [1, ~5]
        k = ctx.normal((BATCH, seq, DIM), seed % 1000 + 1)
        out = ctx.run({"q": q, "k": k, "pos_emb": table}, npos_max=npos_max)
        positions = out / q[..., :, None, 0]
        gates = _sigmoid(q @ np.swapaxes(k, -1, -2) / math.sqrt(DIM)) * seen
        expected = np.minimum(np.flip(np.cumsum(np.flip(gates, -1), -1), -1), npos_max - 1)
        ctx.assert_close(positions, expected, "positions read off a linear table vs the "
                         "clamped sum of the gates from key j to the query", scale=npos_max)
        slack = ctx.tol.rtol * npos_max + ctx.tol.atol
        rises = np.diff(positions, axis=-1) > slack
        if rises.any():
            b, i, j = (int(v) for v in np.argwhere(rises)[0])
            raise CheckFailure(f"position of query {i} rises from key {j} to key {j + 1}: "
                               f"{positions[b, i, j]!r} -> {positions[b, i, j + 1]!r} (it counts "
                               "the gates from the key to the query, so it can only fall)")
        if positions.min() < -slack or positions.max() > npos_max - 1 + slack:
            raise CheckFailure(f"positions outside [0, npos_max − 1 = {npos_max - 1}]: "
                               f"{positions.min()!r} .. {positions.max()!r}")


@register("cope_interpolation_between_rows")
def interpolation_between_rows(ctx: Context) -> None:
    """One query at the end of L keys: the first L − 1 keys have gate 1, the last (the query's
    own) sigmoid(x) for a known x, so p_j = L − 1 − j + sigmoid(x) and the term is
    w·e[⌈p⌉] + (1 − w)·e[⌊p⌋] with w = sigmoid(x) (the weight on the ceiling row), exactly
    e[p] at integer p (x = ±64). Catches swapped floor and ceiling weights."""
    length = 6
    npos_max = length + 1
    xs = np.array([-64.0, -2.0, -0.5, 1.0, 3.0, 64.0])
    q = np.zeros((xs.size, 1, DIM))
    q[..., 0], q[..., 1] = 8.0, 1.0
    k = np.zeros((xs.size, length, DIM))
    k[:, :-1, 0] = 8.0  # q·k = 64 with scale 1: gate 1
    k[:, -1, 1] = xs  # q·k = x
    table = ctx.normal((npos_max, DIM), 21)
    out = ctx.run({"q": q, "k": k, "pos_emb": table}, npos_max=npos_max, scale=1.0)
    w = _sigmoid(xs)[:, None]
    distance = (length - 1 - np.arange(length))[None, :]  # keys after j, up to the query
    per_row = (q @ table.T)[:, 0, :]  # [batch, npos_max]
    low = np.take_along_axis(per_row, np.broadcast_to(distance, (xs.size, length)), axis=-1)
    high = np.take_along_axis(per_row, np.broadcast_to(distance + 1, (xs.size, length)),
                              axis=-1)
    expected = (w * high + (1 - w) * low)[:, None, :]
    ctx.assert_close(out, expected, "the term at p = L − 1 − j + sigmoid(x) vs "
                     "sigmoid(x)·e[⌈p⌉] + (1 − sigmoid(x))·e[⌊p⌋]")


@register("cope_causal")
def causal(ctx: Context) -> None:
    """Above the diagonal the term is exactly 0, and changing the keys after a query changes
    nothing in its row (their gates do not count)."""
    seq, npos_max, cut = 7, 8, 4

    @ctx.given(seed=st.integers(0, 2**31))
    def check(seed: int) -> None:
        s = seed % 1000
        inputs = {"q": ctx.normal((BATCH, seq, DIM), s), "k": ctx.normal((BATCH, seq, DIM), s + 1),
                  "pos_emb": ctx.normal((npos_max, DIM), s + 2)}
        out = ctx.run(inputs, npos_max=npos_max)
        above = ~_visible(seq, seq)
        ctx.assert_equal(out[:, above], np.zeros((BATCH, int(above.sum()))),
                         "the term above the diagonal (keys after the query)")
        changed = dict(inputs, k=inputs["k"].copy())
        changed["k"][:, cut:] = ctx.normal((BATCH, seq - cut, DIM), s + 3)
        again = ctx.run(changed, npos_max=npos_max)
        ctx.assert_close(again[:, :cut], out[:, :cut],
                         f"rows 0..{cut - 1} after changing keys {cut}..{seq - 1}")


@register("cope_kv_cache_alignment")
def kv_cache_alignment(ctx: Context) -> None:
    """Queries sit at the end of the keys: q_len < k_len gives the last rows of the square
    term computed with every query."""
    seq, npos_max = 8, 6
    q = ctx.normal((BATCH, seq, DIM), 31)
    k = ctx.normal((BATCH, seq, DIM), 32)
    table = ctx.normal((npos_max, DIM), 33)
    square = ctx.run({"q": q, "k": k, "pos_emb": table}, npos_max=npos_max)
    for q_len in (1, 3):
        part = ctx.run({"q": q[:, seq - q_len:], "k": k, "pos_emb": table}, npos_max=npos_max)
        ctx.assert_close(part, square[:, seq - q_len:],
                         f"q_len={q_len} vs the last rows of q_len=k_len={seq}")


@register("cope_padded_keys_ignored")
def padded_keys_ignored(ctx: Context) -> None:
    """Junk tokens inserted among the real ones (queries and keys, as in a packed or padded
    batch) and marked False in key_mask change nothing: on the real queries and keys the term
    equals the term computed without them, and it is 0 on the padded keys. Inside the sequence,
    so that a causal query's sums run across the padding (at the start or the end the causal
    sums never reach it). Catches padded keys' gates counted."""
    seq, pad, at, npos_max = 6, 3, 2, 10
    real = np.ones(seq + pad, bool)
    real[at:at + pad] = False

    @ctx.given(seed=st.integers(0, 2**31))
    def check(seed: int) -> None:
        s = seed % 1000
        q = ctx.normal((BATCH, seq, DIM), s)
        k = ctx.normal((BATCH, seq, DIM), s + 1)
        table = ctx.normal((npos_max, DIM), s + 2)
        plain = ctx.run({"q": q, "k": k, "pos_emb": table}, npos_max=npos_max)
        junk_q = ctx.normal((BATCH, seq + pad, DIM), s + 3)
        junk_k = ctx.normal((BATCH, seq + pad, DIM), s + 4) * 4  # gates far from 0
        padded_q, padded_k = junk_q.copy(), junk_k.copy()
        padded_q[:, real], padded_k[:, real] = q, k
        out = ctx.run({"q": padded_q, "k": padded_k, "pos_emb": table,
                       "key_mask": np.broadcast_to(real, (BATCH, seq + pad)).copy()},
                      npos_max=npos_max)
        ctx.assert_close(out[:, real][..., real], plain,
                         f"{pad} masked junk tokens at {at}: the term on the real queries and "
                         "keys vs without them")
        ctx.assert_equal(out[..., ~real], np.zeros((BATCH, seq + pad, pad)),
                         "the term on the padded keys")
