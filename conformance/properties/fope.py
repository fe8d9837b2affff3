"""Properties of FoPE: the clipped pairs (frequencies at or below 2π/L) pass through, identity
coefficients give RoPE with those frequencies at zero, and at position 0 each pair is scaled
by its column of cos_coef."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from ..context import CheckFailure, Context
from . import register

KV, GROUP, SEQ, DIM, BASE = 2, 2, 5, 8, 10000.0
SEEDS = st.integers(0, 2**31)
# ω = 1, 0.1, 0.01, 0.001 (periods 6.3, 62.8, 628.3, 6283): L = 62 keeps 1, 63 keeps 2,
# 629 keeps 3, 7000 keeps all 4
LENGTHS = st.sampled_from([62, 63, 629, 7000])


def _kept(length: int) -> int:
    """How many of base^(-2i/DIM) lie above the floor 2π/length (float64, computed here)."""
    return sum(BASE ** (-2.0 * i / DIM) > 2.0 * math.pi / length for i in range(DIM // 2))


def _inputs(ctx: Context, seed: int, kept: int, positions: np.ndarray) -> dict[str, np.ndarray]:
    return {"x": ctx.normal((KV * GROUP, SEQ, DIM), seed),
            "cos_coef": ctx.normal((KV, kept, kept), seed + 1),
            "sin_coef": ctx.normal((KV, kept, kept), seed + 2), "positions": positions}


@register("fope_clipped_pairs_pass_through")
def clipped_pairs_pass_through(ctx: Context) -> None:
    """With any coefficients, the pairs j >= M (M: the frequencies above 2π/L, counted here)
    come out bit for bit (frequency zero), and the kept pairs move (at positions > 0)."""

    @ctx.given(seed=SEEDS, length=LENGTHS, start=st.integers(1, 2**20))
    def check(seed: int, length: int, start: int) -> None:
        kept = _kept(length)
        inputs = _inputs(ctx, seed, kept, np.arange(start, start + SEQ))
        out = ctx.run(inputs, max_position_embeddings=length)
        x, half = inputs["x"], DIM // 2
        clipped = np.r_[kept:half, half + kept:DIM]
        ctx.assert_equal(out[..., clipped], x[..., clipped],
                         f"features of the clipped pairs {list(range(kept, half))} (L {length})")
        if np.array_equal(out[..., :kept], x[..., :kept]):
            raise CheckFailure(f"the kept pairs 0..{kept - 1} were not rotated (L {length})")


def _rope_truth(x: np.ndarray, positions: np.ndarray, kept: int) -> np.ndarray:
    half = DIM // 2
    omega = np.array([BASE ** (-2.0 * i / DIM) if i < kept else 0.0 for i in range(half)])
    angle = positions[:, None].astype(np.float64) * omega
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * np.cos(angle) - b * np.sin(angle),
                           b * np.cos(angle) + a * np.sin(angle)], axis=-1)


@register("fope_identity_coefficients_are_rope")
def identity_coefficients_are_rope(ctx: Context) -> None:
    """Identity cos_coef and sin_coef (no extra Fourier components) give RoPE with the clipped
    frequencies at zero (float64 truth computed here)."""

    @ctx.given(seed=SEEDS, length=LENGTHS, start=st.integers(0, 2**20))
    def check(seed: int, length: int, start: int) -> None:
        kept = _kept(length)
        positions = np.arange(start, start + SEQ)
        eye = np.broadcast_to(np.eye(kept), (KV, kept, kept)).copy()
        inputs = {**_inputs(ctx, seed, kept, positions), "cos_coef": eye, "sin_coef": eye}
        out = ctx.run(inputs, max_position_embeddings=length)
        truth = _rope_truth(inputs["x"], positions, kept)
        ctx.assert_close(out, truth, f"FoPE with identity coefficients (L {length}, positions "
                         f"{start}..)", scale=float(np.abs(inputs["x"]).max()),
                         angle_bound=float(start + SEQ))


@register("fope_at_position_zero")
def at_position_zero(ctx: Context) -> None:
    """At position 0 every cos is 1 and every sin 0: feature j and j + d/2 of a kept pair are
    scaled by the column sum Σ_i cos_coef[g, i, j] of the head's coefficient head g = h //
    (heads / kv_heads) (float64 truth computed here)."""

    @ctx.given(seed=SEEDS, length=LENGTHS)
    def check(seed: int, length: int) -> None:
        kept = _kept(length)
        inputs = _inputs(ctx, seed, kept, np.zeros(SEQ, dtype=np.int64))
        out = ctx.run(inputs, max_position_embeddings=length)
        half = DIM // 2
        columns = np.ones((KV, half))
        columns[:, :kept] = inputs["cos_coef"].sum(axis=-2)
        per_head = np.repeat(columns, GROUP, axis=0)[:, None, :]  # [heads, 1, half]
        truth = inputs["x"] * np.concatenate([per_head, per_head], axis=-1)
        ctx.assert_close(out, truth, f"FoPE at position 0 (L {length})",
                         scale=float(np.abs(truth).max()) or 1.0)
