"""Properties of ggml's rope: agreement with transformers' semantics within the float32
ladder's error, rope_freqs dividing theta, YaRN's internal attention factor, M-RoPE sectors."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from posenc.dialects.ggml import to_ggml
from posenc.dialects.transformers import RopeLayer
from posenc.reference.rope import rope as rope_reference

from ..context import CheckFailure, Context
from . import register

EPS32 = 2.0**-24
DIM = 32
CONFIGS = {  # transformers rope dicts for a 32-wide head
    "default": {"rope_type": "default", "rope_theta": 10000.0},
    "linear": {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0},
    "yarn": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 1024,
             "rope_theta": 10000.0},
    "yarn_mscale": {"rope_type": "yarn", "factor": 16.0, "mscale": 0.707,
                    "mscale_all_dim": 1.0, "original_max_position_embeddings": 512,
                    "rope_theta": 500000.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 512,
               "rope_theta": 500000.0},
}


def _call(ctx: Context, x: np.ndarray, positions: np.ndarray, params: dict) -> np.ndarray:
    return ctx.run({"x": x, "positions": positions}, **params)


@register("ggml_rope_matches_transformers")
def matches_transformers(ctx: Context) -> None:
    """A transformers config translated by posenc.dialects.to_ggml (NEOX for the half layout,
    NORMAL for an interleaved checkpoint) rotates like transformers' rope, within the error of
    ggml's float32 angle ladder: about (2i + 6) float32 roundings of the angle of pair i; a
    translation that drops the schedule (freq_scale, rope_freqs, attn_factor) is far outside."""

    @ctx.given(name=st.sampled_from(sorted(CONFIGS)), interleaved=st.booleans(),
               seed=st.integers(0, 10**6))
    def check(name: str, interleaved: bool, seed: int) -> None:
        scaling = dict(CONFIGS[name])
        layer = RopeLayer("all", DIM, scaling, None, interleaved)
        params = to_ggml(layer)
        x = ctx.normal((2, 6, DIM), seed)
        positions = np.random.default_rng(seed).integers(0, 4096, 6)
        got = _call(ctx, x, positions, params)
        expected = rope_reference(x, positions, base=10000.0,
                                  layout="interleaved" if interleaved else "half",
                                  rotary_dim=None, scaling=scaling, seq_len=None)
        resolved = layer.resolve()
        phases = positions.max() * np.asarray(resolved.inv_freq)
        slack = max((2 * i + 6) * EPS32 * phase for i, phase in enumerate(phases)) + 4 * EPS32
        scale = float(np.abs(x).max()) * 2 * max(resolved.attention_factor, 1.0)
        bound = scale * slack + 4 * ctx.tol.rtol * scale
        err = float(np.abs(got - expected).max())
        if err > bound:
            raise CheckFailure(f"{name} ({'normal' if interleaved else 'neox'}): ggml rope "
                               f"differs from transformers' by {err:.3e} > {bound:.3e} (the "
                               "float32 ladder's bound)", {"max_abs": err})
        if name != "default":  # the check can tell a dropped schedule
            plain = {**params, "freq_scale": 1.0, "freq_factors": None, "attn_factor": 1.0,
                     "ext_factor": 0.0}
            wrong = rope_reference(x, positions, base=float(scaling["rope_theta"]),
                                   layout="interleaved" if interleaved else "half",
                                   rotary_dim=None, scaling=None, seq_len=None)
            if float(np.abs(wrong - expected).max()) <= 4 * bound:
                raise CheckFailure(f"{name}: the bound {bound:.3e} cannot tell the schedule "
                                   f"from none ({plain})")


@register("ggml_rope_freq_factors_divide")
def freq_factors_divide(ctx: Context) -> None:
    """rope_freqs all equal to 2 (a power of two: exact in float32) rotates exactly as
    freq_scale 1/2; factors of 1 are no factors."""
    x = ctx.normal((2, 5, 16), 41)
    positions = np.array([0, 3, 100, 2047, 30000])
    for mode in ("normal", "neox"):
        halved = _call(ctx, x, positions, {"mode": mode, "freq_factors": [2.0] * 8})
        scaled = _call(ctx, x, positions, {"mode": mode, "freq_scale": 0.5})
        ctx.assert_close(halved, scaled, f"{mode}: freq_factors 2 vs freq_scale 1/2", scale=4.0,
                         tol=ctx.tol.loosened(2))
        ones = _call(ctx, x, positions, {"mode": mode, "freq_factors": [1.0] * 8})
        plain = _call(ctx, x, positions, {"mode": mode})
        ctx.assert_close(ones, plain, f"{mode}: freq_factors 1 vs none", scale=4.0,
                         tol=ctx.tol.loosened(2))


@register("ggml_rope_yarn_internal_mscale")
def yarn_internal_mscale(ctx: Context) -> None:
    """At position 0 (no rotation) YaRN scales the rotated features by
    attn_factor * (1 + 0.1 ln(1/freq_scale)) (ggml's internal mscale) and leaves the others."""
    x = ctx.normal((3, 1, 16), 42)
    for freq_scale, attn in ((0.25, 1.0), (1 / 40, 1 / (1 + 0.1 * math.log(40))), (0.5, 0.8)):
        got = _call(ctx, x, np.array([0]), {"mode": "neox", "n_dims": 8, "freq_scale": freq_scale,
                                            "ext_factor": 1.0, "attn_factor": attn,
                                            "n_ctx_orig": 4096})
        factor = attn * (1 + 0.1 * math.log(1 / freq_scale))
        expected = x.copy()
        expected[..., :8] *= factor
        ctx.assert_close(got, expected, f"position 0, freq_scale {freq_scale:g}, attn_factor "
                         f"{attn:g}", scale=4.0, tol=ctx.tol.loosened(4))


@register("ggml_rope_mrope_sections")
def mrope_sections(ctx: Context) -> None:
    """MROPE with all four position rows equal is NEOX; with sections [1, 1, 1, 0] the sector of
    pair i is i mod 3, so pairs 1, 4, 7 follow the h row (0 here: unrotated). VISION restarts
    each section's ladder: with equal rows, pair sections[0] turns like pair 0."""
    x = ctx.normal((2, 3, 16), 43)
    p = np.array([5, 60, 700])
    rows = np.stack([p, p, p, p])
    ctx.assert_close(_call(ctx, x, rows, {"mode": "mrope", "sections": [2, 3, 3, 0]}),
                     _call(ctx, x, p, {"mode": "neox"}), "mrope with equal rows vs neox",
                     scale=4.0, tol=ctx.tol.loosened(2))
    zero_h = np.stack([p, 0 * p, p, p])
    got = _call(ctx, x, zero_h, {"mode": "mrope", "sections": [1, 1, 1, 0]})
    for i in (1, 4, 7):
        ctx.assert_close(got[..., [i, i + 8]], x[..., [i, i + 8]],
                         f"mrope [1, 1, 1, 0]: pair {i} follows the zero h row", scale=4.0)
    unit = np.zeros((1, 3, 16))
    unit[..., 0] = unit[..., 2] = 1.0  # pair 0 and pair 2 (the first of the h section)
    got = _call(ctx, unit, rows, {"mode": "vision", "sections": [2, 2, 2, 2]})
    ctx.assert_close(got[..., [2, 10]], got[..., [0, 8]],
                     "vision: pair 2 (h section start) vs pair 0", scale=1.0,
                     tol=ctx.tol.loosened(2))
