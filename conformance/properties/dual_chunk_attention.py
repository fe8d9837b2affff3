"""Properties of Dual Chunk Attention's rotations: the logits of each query form with the keys
it meets are RoPE logits at DCA's distances, and positions enter only modulo the chunk
length."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ..context import Context
from . import register

HEADS, SEQ, DIM = 2, 20, 8
SEEDS = st.integers(0, 2**31)
# (chunk_size, local_size): local window narrower than, wider than, and absent from the chunk
CONFIGS = st.sampled_from([(8, 3), (8, 5), (6, 0)])


def _rotate_half(x: np.ndarray, distance: np.ndarray) -> np.ndarray:
    """float64 RoPE (pairs (j, j + d/2), base 10000) of x [..., dim] by distance [...]."""
    half = x.shape[-1] // 2
    theta = 10000.0 ** (-np.arange(half) * 2.0 / x.shape[-1])
    angle = distance[..., None].astype(np.float64) * theta
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * np.cos(angle) - b * np.sin(angle),
                           b * np.cos(angle) + a * np.sin(angle)], axis=-1)


def _distances(p: np.ndarray, chunk_size: int, local_size: int, critical: bool
               ) -> tuple[np.ndarray, np.ndarray]:
    """([i, j] query-key distance, [i, j] form: 0 intra, 1 succ, 2 inter) for j <= i."""
    length = chunk_size - local_size
    qi, kj = p[:, None], p[None, :]
    chunk_gap = qi // length - kj // length
    within_q, within_k = qi % length, kj % length
    if critical:
        succ, inter = within_q + length, within_q + chunk_size
    else:
        succ = np.minimum(within_q + length, chunk_size)
        inter = np.full_like(within_q, min(2 * length - 1, chunk_size))
    form = np.where(chunk_gap == 0, 0, np.where(chunk_gap == 1, 1, 2))
    distance = np.where(form == 0, qi - kj, np.where(form == 1, succ, inter) - within_k)
    return distance, form


@register("dca_logit_distances")
def logit_distances(ctx: Context) -> None:
    """For every causal pair (i, j), the query form DCA uses for key j (intra: same chunk,
    succ: the chunk before, inter: earlier) dotted with the rotated key equals q_i · R(D) k_j
    with D = p_i - p_j, min(p_i mod L + L, chunk_size) - p_j mod L or min(2L - 1, chunk_size)
    - p_j mod L (critical: p_i mod L + L - p_j mod L, p_i mod L + chunk_size - p_j mod L);
    float64 truth computed here."""
    critical = bool(ctx.params.get("critical", False))

    @ctx.given(seed=SEEDS, config=CONFIGS, start=st.integers(0, 2**20))
    def check(seed: int, config: tuple[int, int], start: int) -> None:
        chunk_size, local_size = config
        q, k = ctx.normal((HEADS, SEQ, DIM), seed), ctx.normal((1, SEQ, DIM), seed + 1)
        p = np.arange(start, start + SEQ)
        out = ctx.raw({"q": q, "k": k, "positions": p}, chunk_size=chunk_size,
                      local_size=local_size)
        forms = np.stack([ctx.to_numpy(part) for part in out[:3]])  # [3, heads, seq, dim]
        k_out = ctx.to_numpy(out[3])
        distance, form = _distances(p, chunk_size, local_size, critical)
        causal = p[None, :] <= p[:, None]
        logits = np.einsum("fhid,hjd->fhij", forms, np.broadcast_to(k_out, (HEADS, SEQ, DIM)))
        actual = np.take_along_axis(logits, form[None, None], axis=0)[0]
        truth = np.einsum("hijd,hjd->hij", _rotate_half(q[:, :, None, :], distance[None]),
                          np.broadcast_to(k, (HEADS, SEQ, DIM)))
        scale = float(np.abs(q).max() * np.abs(k).max()) * DIM
        ctx.assert_close(np.where(causal, actual, 0.0), np.where(causal, truth, 0.0),
                         f"DCA logits (chunk_size {chunk_size}, local_size {local_size}, "
                         f"positions {start}..{start + SEQ - 1})", scale=scale,
                         angle_bound=float(2 * chunk_size + SEQ))


@register("dca_positions_modulo_chunk")
def positions_modulo_chunk(ctx: Context) -> None:
    """Shifting every position by a multiple of L = chunk_size - local_size leaves all four
    outputs bit for bit unchanged, and q_inter is one rotation for every token (a query vector
    repeated over the sequence comes out as the same row everywhere)."""

    @ctx.given(seed=SEEDS, config=CONFIGS, chunks=st.integers(1, 2**16))
    def check(seed: int, config: tuple[int, int], chunks: int) -> None:
        chunk_size, local_size = config
        length = chunk_size - local_size
        q = np.broadcast_to(ctx.normal((HEADS, 1, DIM), seed), (HEADS, SEQ, DIM)).copy()
        k = ctx.normal((1, SEQ, DIM), seed + 1)
        p = np.arange(SEQ) * 3
        params = {"chunk_size": chunk_size, "local_size": local_size}
        base = [ctx.to_numpy(x) for x in ctx.raw({"q": q, "k": k, "positions": p}, **params)]
        moved = [ctx.to_numpy(x) for x in ctx.raw(
            {"q": q, "k": k, "positions": p + chunks * length}, **params)]
        for name, a, b in zip(("q_intra", "q_succ", "q_inter", "k"), moved, base, strict=True):
            ctx.assert_equal(a, b, f"{name} after shifting positions by {chunks}·L = "
                                   f"{chunks * length}")
        if not ctx.params.get("critical", False):
            inter = base[2]
            ctx.assert_equal(inter, np.broadcast_to(inter[:, :1], inter.shape),
                             "q_inter of one query vector at every position")
