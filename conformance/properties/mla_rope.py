"""Properties of MLA decoupled rope: the nope slice passes through, the interleave changes the
cached key but not the logits, logits depend on relative positions, and the softmax scale
carries YaRN's mscale²."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from ..context import CheckFailure, Context
from . import register

# machine epsilon of each dtype under test (the spacing of numbers in [1, 2))
ULP = {"float64": 2.0**-52, "float32": 2.0**-23, "bfloat16": 2.0**-7, "float16": 2.0**-10}

HEADS, SEQ, NOPE, ROPE = 3, 4, 6, 8
SEEDS = st.integers(0, 2**31)


def _inputs(ctx: Context, seed: int) -> dict[str, np.ndarray]:
    return {"q": ctx.normal((HEADS, SEQ, NOPE + ROPE), seed),
            "k_rot": ctx.normal((1, SEQ, ROPE), seed + 1)}


def _arrays(ctx: Context, out: tuple) -> tuple[np.ndarray, np.ndarray]:
    """(q_embed, k_rot_embed) of an output as float64 NumPy."""
    return ctx.to_numpy(out[0]), ctx.to_numpy(out[1])


def _logits(q: np.ndarray, k_nope: np.ndarray, k_rot: np.ndarray) -> np.ndarray:
    """[heads, seq, seq] q·k with k = [k_nope | k_rot broadcast to every head]."""
    k = np.concatenate([k_nope, np.broadcast_to(k_rot, (*k_nope.shape[:-1], ROPE))], axis=-1)
    return np.einsum("hsd,htd->hst", q, k)


@register("mla_nope_slice_passes_through")
def nope_slice_passes_through(ctx: Context) -> None:
    """q's leading qk_nope_head_dim features come out bit for bit; the trailing ones do not
    (at positions > 0)."""

    @ctx.given(seed=SEEDS, start=st.integers(1, 2**20))
    def check(seed: int, start: int) -> None:
        inputs = _inputs(ctx, seed)
        positions = np.arange(start, start + SEQ)
        q_out, _, _ = ctx.raw({**inputs, "positions": positions})
        q_out = ctx.to_numpy(q_out)
        ctx.assert_equal(q_out[..., :NOPE], inputs["q"][..., :NOPE], "q's nope slice")


@register("mla_logits_match_across_interleave")
def logits_match_across_interleave(ctx: Context) -> None:
    """deinterleave (transformers) and interleaved (DeepSeek's complex pairs) give the same
    logits, while their cached k_rot differ: interleaved's feature 2j is deinterleave's j and
    2j + 1 is j + r/2 (to a rounding: see below)."""
    perm = np.concatenate([np.arange(0, ROPE, 2), np.arange(1, ROPE, 2)])

    @ctx.given(seed=SEEDS, start=st.integers(0, 2**16))
    def check(seed: int, start: int) -> None:
        inputs = {**_inputs(ctx, seed), "positions": np.arange(start, start + SEQ)}
        k_nope = ctx.normal((HEADS, SEQ, NOPE), seed + 2)
        q_d, k_d = _arrays(ctx, ctx.raw(inputs, layout="deinterleave"))
        q_i, k_i = _arrays(ctx, ctx.raw(inputs, layout="interleaved"))
        scale = float(np.abs(inputs["q"]).max() * np.abs(inputs["k_rot"]).max()) * (NOPE + ROPE)
        ctx.assert_close(_logits(q_i, k_nope, k_i), _logits(q_d, k_nope, k_d),
                         "logits interleaved vs deinterleave", scale=scale,
                         angle_bound=float(start + SEQ))
        # the same products and sums, permuted: equal up to how they are rounded. A compiler
        # (XLA: jax.jit, tf.function(jit_compile=True), and JAX's eager calls) may contract
        # a*cos - b*sin into one FMA in one layout and not the other, a rounding apart: four
        # ulps of the largest input allows that and nothing a layout bug gives (O(1) errors)
        ulp = ULP[ctx.dtype] * float(np.abs(inputs["k_rot"]).max())
        worst = float(np.max(np.abs(k_i[..., perm] - k_d)))
        if not worst <= 4 * ulp:
            raise CheckFailure(f"interleaved k_rot, de-interleaved: differs from deinterleave's "
                               f"by {worst:.3g}, more than 4 ulps ({4 * ulp:.3g}) of the "
                               "largest input", {"max_abs": worst})
        if np.array_equal(k_i, k_d):
            raise CheckFailure("the cached k_rot is the same in both layouts: the interleave "
                               "was not applied")


@register("mla_relative_invariance")
def relative_invariance(ctx: Context) -> None:
    """Shifting every position by the same amount leaves the logits unchanged (the shared
    rotary key head is RoPE of the relative position)."""

    @ctx.given(seed=SEEDS, shift=st.one_of(st.integers(1, 1024), st.integers(1, 2**20)))
    def check(seed: int, shift: int) -> None:
        inputs = _inputs(ctx, seed)
        k_nope = ctx.normal((HEADS, SEQ, NOPE), seed + 2)
        positions = np.arange(SEQ) * 3
        a = _arrays(ctx, ctx.raw({**inputs, "positions": positions}))
        b = _arrays(ctx, ctx.raw({**inputs, "positions": positions + shift}))
        scale = float(np.abs(inputs["q"]).max() * np.abs(inputs["k_rot"]).max()) * (NOPE + ROPE)
        ctx.assert_close(_logits(b[0], k_nope, b[1]), _logits(a[0], k_nope, a[1]),
                         f"logits after shifting every position by {shift}", scale=scale * 2,
                         angle_bound=float(shift + 3 * SEQ))


@register("mla_softmax_scale")
def softmax_scale(ctx: Context) -> None:
    """The returned scale is qk_head_dim^-0.5 · (0.1 μ ln s + 1)² for YaRN with factor s > 1 and
    mscale_all_dim μ, and qk_head_dim^-0.5 without scaling (float64 truth computed here)."""

    @ctx.given(factor=st.floats(1.5, 64), mu=st.sampled_from([0.0, 0.707, 1.0]))
    def check(factor: float, mu: float) -> None:
        inputs = _inputs(ctx, 0)
        scaling = {"rope_type": "yarn", "factor": factor, "mscale": mu or 1.0,
                   "mscale_all_dim": mu, "original_max_position_embeddings": 4096}
        _, _, scale = ctx.raw(inputs, scaling=scaling)
        truth = (NOPE + ROPE) ** -0.5 * ((0.1 * mu * math.log(factor) + 1.0) ** 2 if mu else 1)
        if not math.isclose(float(scale), truth, rel_tol=1e-12):
            raise CheckFailure(f"softmax scale {float(scale)!r} != {truth!r} for factor "
                               f"{factor}, mscale_all_dim {mu}")
