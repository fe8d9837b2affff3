"""Properties of rotary position embedding."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from posenc.errors import Unsupported

from .. import rotary_bound
from ..context import CheckFailure, Context
from ..tolerances import JUDGEABLE, Tolerance, float32_phase_error
from . import register

DIM = 16
SEEDS = st.integers(0, 2**32 - 1)


def _layout(ctx: Context) -> str:
    return ctx.params.get("layout", "half")


def _rotate(ctx: Context, x: np.ndarray, positions: np.ndarray | None, **params: object):
    return ctx.run({"x": x, "positions": positions}, **params)


def _close(ctx: Context, actual: np.ndarray, expected: np.ndarray, what: str, *, x: np.ndarray,
           positions: np.ndarray, angle_bound: float, tol: Tolerance, sides: int = 2,
           **params: object) -> None:
    """``actual`` against ``expected``, one rope result of ``x`` at ``positions`` (``params``),
    under the per-element conventional bound of ``sides`` rotations (rotary_bound.py), or the
    comparison's own tolerance where that does not apply."""
    bound = rotary_bound.for_outputs(ctx.spec, {**ctx.params, **params},
                                     {"x": x, "positions": positions}, expected, tol, sides)
    ctx.assert_close(actual, expected, what, scale=float(np.abs(x).max()),
                     angle_bound=angle_bound, tol=tol, bound=bound)


def _dot_bound(ctx: Context, max_position: float) -> float:
    """Relative error allowed for <R_m q, R_n k> / (|q| |k|): two rotated vectors, each off by
    output rounding plus the float angle error at the largest position (theta_0 = 1)."""
    t = ctx.tol
    return 2 * (t.rtol + t.atol + t.angle * t.compute_eps * max_position)


def check_logit_unchanged(ctx: Context, out: np.ndarray, q: np.ndarray, k: np.ndarray,
                          top: float, what: str) -> None:
    """``out`` = rotated (q, k) before and (q, k) after a shift of both positions: their dot
    products must agree within two rotations' error at positions up to ``top``."""
    before, after = out[0] @ out[1], out[2] @ out[3]
    allowed = _dot_bound(ctx, 2 * top) * float(np.linalg.norm(q) * np.linalg.norm(k))
    if abs(after - before) > allowed:
        raise CheckFailure(
            f"<R(m) q, R(n) k> changed under {what}: {before:.9g} -> {after:.9g} (difference "
            f"{abs(after - before):.3e} > tolerance {allowed:.3e})",
            {"max_abs": abs(after - before), "tolerance": allowed})


@register("rope_identity_at_zero")
def identity_at_zero(ctx: Context) -> None:
    """R_0 = I: position 0 returns x bit-identically (cos 0 = 1 and sin 0 = 0 exactly)."""
    if ctx.rescaled_by_conversion():
        raise Unsupported("its declared xPos centre is converted by a rescaling that rounds: "
                          "bit-identity at position 0 is not observable through it")

    @ctx.given(seed=SEEDS)
    def check(seed: int) -> None:
        x = ctx.normal((2, 5, DIM), seed)
        ctx.assert_equal(_rotate(ctx, x, np.zeros(5, np.int64)), x, "rope at position 0")


@register("rope_norm_preserving")
def norm_preserving(ctx: Context) -> None:
    """Rotations keep every row's Euclidean norm."""

    @ctx.given(seed=SEEDS, top=st.integers(1, 2**16))
    def check(seed: int, top: int) -> None:
        x = ctx.normal((3, 4, DIM), seed)
        positions = ctx.draw_positions(np.random.default_rng(seed), 0, top - 1, 4)
        out = _rotate(ctx, x, positions)
        norms = np.linalg.norm(x, axis=-1)
        ctx.assert_close(np.linalg.norm(out, axis=-1), norms, "row norms",
                         scale=float(norms.max()), tol=ctx.tol.loosened(2))


@register("rope_relative_invariance")
def relative_invariance(ctx: Context) -> None:
    """<R_m q, R_n k> depends on m - n only: shifting both positions by s changes nothing.

    args: max_shift (default 100000)."""
    max_shift = int(ctx.args.get("max_shift", 100_000))

    @ctx.given(seed=SEEDS, m=st.integers(0, 512), n=st.integers(0, 512),
               shift=st.one_of(st.integers(0, 1024), st.integers(0, max_shift)))
    def check(seed: int, m: int, n: int, shift: int) -> None:
        q, k = ctx.normal((2, DIM), seed)
        out = _rotate(ctx, np.stack([q, k, q, k]), np.array([m, n, m + shift, n + shift]))
        before, after = out[0] @ out[1], out[2] @ out[3]
        scale = float(np.linalg.norm(q) * np.linalg.norm(k))
        allowed = _dot_bound(ctx, m + shift + n + shift) * scale
        if abs(after - before) > allowed:
            raise CheckFailure(
                f"<R_m q, R_n k> changed under a shift: m={m}, n={n}, shift={shift}: "
                f"{before:.9g} -> {after:.9g} (difference {abs(after - before):.3e} > "
                f"tolerance {allowed:.3e})",
                {"max_abs": abs(after - before), "tolerance": allowed})


@register("rope_composition")
def composition(ctx: Context) -> None:
    """R_b (R_a x) = R_{a+b} x: rotations by positions compose additively."""

    @ctx.given(seed=SEEDS, top=st.integers(1, 4096))
    def check(seed: int, top: int) -> None:
        rng = np.random.default_rng(seed)
        x = ctx.normal((2, 6, DIM), seed)
        a, b = rng.integers(0, top, size=6), rng.integers(0, top, size=6)
        twice = _rotate(ctx, _rotate(ctx, x, a), b)
        _close(ctx, twice, _rotate(ctx, x, a + b), "R_b(R_a x) vs R_(a+b) x", x=x,
               positions=a + b, angle_bound=2.0 * float((a + b).max()), tol=ctx.tol.loosened(3),
               sides=3)


def interleaved_to_half(dim: int) -> np.ndarray:
    """Channel permutation p with half-layout features = interleaved features[p]."""
    return np.concatenate([np.arange(0, dim, 2), np.arange(1, dim, 2)])


@register("rope_layout_permutation")
def layout_permutation(ctx: Context) -> None:
    """interleaved(x) = P⁻¹ half(P x) for the channel permutation P pairing (2i, 2i+1) ↔ (i, i+d/2)."""
    perm = interleaved_to_half(DIM)
    inverse = np.argsort(perm)

    @ctx.given(seed=SEEDS, top=st.integers(1, 4096))
    def check(seed: int, top: int) -> None:
        x = ctx.normal((2, 7, DIM), seed)
        positions = ctx.draw_positions(np.random.default_rng(seed), 0, top - 1, 7)
        inter = _rotate(ctx, x, positions, layout="interleaved")
        half = _rotate(ctx, x[..., perm], positions, layout="half")[..., inverse]
        _close(ctx, half, inter, "P⁻¹ half(P x) vs interleaved(x)", x=x, positions=positions,
               angle_bound=float(positions.max()), tol=ctx.tol.loosened(2), layout="interleaved")


@register("rope_partial_tail")
def partial_tail(ctx: Context) -> None:
    """With rotary_dim r < d the features r.. pass through bit-identically and the first r
    equal a full rotation of x[..., :r]."""
    dim = 24

    @ctx.given(seed=SEEDS, rotary_dim=st.sampled_from([2, 8, 16]))
    def check(seed: int, rotary_dim: int) -> None:
        x = ctx.normal((3, 5, dim), seed)
        positions = ctx.draw_positions(np.random.default_rng(seed), 0, 2047, 5)
        out = _rotate(ctx, x, positions, rotary_dim=rotary_dim)
        ctx.assert_equal(out[..., rotary_dim:], x[..., rotary_dim:], "pass-through features")
        head_x = np.ascontiguousarray(x[..., :rotary_dim])
        head = _rotate(ctx, head_x, positions)
        _close(ctx, out[..., :rotary_dim], head, "rotated features vs full rope of the slice",
               x=head_x, positions=positions, angle_bound=float(positions.max()),
               tol=ctx.tol.loosened(2))


@register("rope_decode_offset")
def decode_offset(ctx: Context) -> None:
    """Decoding one token at position t (KV cache) equals row t of the full-sequence result."""
    length = 32

    @ctx.given(seed=SEEDS, t=st.integers(0, length - 1), start=st.sampled_from([0, 4096]))
    def check(seed: int, t: int, start: int) -> None:
        x = ctx.normal((2, length, DIM), seed)
        full = _rotate(ctx, x, np.arange(start, start + length))
        row = np.ascontiguousarray(x[:, t : t + 1])
        step = _rotate(ctx, row, np.array([start + t]))
        _close(ctx, step, full[:, t : t + 1], f"token at offset {start + t} vs full row", x=row,
               positions=np.array([start + t]), angle_bound=float(start + length),
               tol=ctx.tol.loosened(2))


@register("rope_batched_positions")
def batched_positions(ctx: Context) -> None:
    """positions [batch, seq] apply to x[b, ..., s, :]: each batch row equals an unbatched call."""

    @ctx.given(seed=SEEDS)
    def check(seed: int) -> None:
        x = ctx.normal((3, 2, 6, DIM), seed)
        positions = np.random.default_rng(seed).integers(0, 1024, size=(3, 6))
        out = _rotate(ctx, x, positions)
        for b in range(3):
            _close(ctx, out[b], _rotate(ctx, x[b], positions[b]), f"batch row {b}", x=x[b],
                   positions=positions[b], angle_bound=1024.0, tol=ctx.tol.loosened(2))


@register("rope_linear_interpolation")
def linear_interpolation(ctx: Context) -> None:
    """Position interpolation: linear scaling by s at position s*m equals plain RoPE at m.

    args: factor (default 4)."""
    factor = float(ctx.args.get("factor", 4.0))

    @ctx.given(seed=SEEDS, top=st.integers(1, 2**14))
    def check(seed: int, top: int) -> None:
        x = ctx.normal((2, 8, DIM), seed)
        m = np.random.default_rng(seed).integers(0, top, size=8)
        linear = {"rope_type": "linear", "factor": factor}
        scaled = _rotate(ctx, x, (m * factor).astype(np.int64), scaling=linear)
        _close(ctx, scaled, _rotate(ctx, x, m), f"linear(s={factor:g}) at s*m vs default at m",
               x=x, positions=(m * factor).astype(np.int64), angle_bound=2.0 * float(m.max()),
               tol=ctx.tol.loosened(2), scaling=linear)


def _cos_sin_probe(ctx: Context, positions: np.ndarray, dim: int) -> np.ndarray:
    """Rotating (1, ..., 1, 0, ..., 0) in the half layout returns (cos m*theta_i, sin m*theta_i)."""
    x = np.zeros((len(positions), dim))
    x[:, : dim // 2] = 1.0
    return _rotate(ctx, x, positions, layout="half")


@register("rope_phase_precision")
def phase_precision(ctx: Context) -> None:
    """cos and sin of m*theta_i against float64 truth at positions around 2^17 and 2^20.

    float32 must be within 1e-6 at 2^17 and 5e-4 at 2^20 (plain float32 angles give about
    6e-3 and 5e-2); bfloat16/float16 results may only add their own rounding, so a phase
    computed in a 16-bit float (wrong by whole radians there) fails. Looser precision profiles
    add the error of the arithmetic they admit: ``conventional`` the bound of a float32 angle of
    a float32 frequency, ``(kappa_i + 1) u32 |m theta_i|`` per feature (pow, exp(log) or a
    ladder of products: :func:`~posenc.conformance.tolerances.float32_phase_error`),
    ``reduced`` ``angle * 2^-8 * |m theta_i|`` (see conformance/tolerances.py). Where that
    allowance reaches a tenth of cos/sin's magnitude the check is not judgeable under the
    profile."""
    dim, base = 64, 10000.0
    index = np.arange(dim // 2)
    theta = base ** (-2.0 * index / dim)
    rng = np.random.default_rng(0)
    rounding = {"float64": 0.0, "float32": 0.0, "bfloat16": 2.0**-8, "float16": 2.0**-11}
    t = ctx.tol
    unjudged: list[str] = []
    widest = 0.0
    for centre, target in ((2**17, 1e-6), (2**20, 5e-4)):
        positions = np.concatenate([np.arange(centre - 48, centre + 48),
                                    rng.integers(centre // 2, centre, size=32)])
        got = _cos_sin_probe(ctx, positions, dim)
        angles = positions[:, None].astype(np.float64) * theta
        truth = np.concatenate([np.cos(angles), np.sin(angles)], axis=-1)
        bound = (8 * float(np.finfo(np.float64).eps) * centre if ctx.dtype == "float64"
                 else target + rounding[ctx.dtype])
        angle = np.abs(np.concatenate([angles, angles], axis=-1))
        features = np.concatenate([index, index])
        # what float32 angle and frequency arithmetic (the conventional model) explains
        conventional = float32_phase_error(angle, theta[features], features)
        if t.profile == "conventional" and ctx.dtype != "float64":
            bound = bound + conventional
        else:
            bound = bound + t.angle * t.compute_eps * angle
        bound = np.broadcast_to(bound, angle.shape)
        err = np.abs(got - truth)
        worst = np.unravel_index(int(np.argmax(err - bound)), err.shape)
        if err[worst] > bound[worst]:
            imprecise = err[worst] <= conventional[worst] + rounding[ctx.dtype] + target
            cause = ("consistent with float32 angles m*theta of float32 frequencies (pow, "
                     "exp(log) or a ladder of products: the conventional profile's model), not "
                     "with exact positions" if imprecise else
                     "more than float32 angle and frequency arithmetic explain (a wrong "
                     "frequency, layout or position gives this)")
            raise CheckFailure(
                f"cos/sin at position {positions[worst[0]]} (feature {worst[1]}) off by "
                f"{err[worst]:.3e} > {bound[worst]:.1e}: {cause}",
                {"max_abs": float(err[worst]), "tolerance": float(bound[worst])})
        if np.max(bound) >= JUDGEABLE:  # cos and sin have magnitude 1
            unjudged.append(f"around {centre} (allowed up to {np.max(bound):.2g})")
            widest = max(widest, float(np.max(bound)))
    if unjudged:
        record = {"elements": len(unjudged), "tolerance": widest, "magnitude": 1.0,
                  "fraction": JUDGEABLE, "errors_within": True}
        raise CheckFailure(
            f"cos/sin within the {t.profile} profile's allowance, which reaches a tenth of their "
            f"magnitude {'; '.join(unjudged)}: not judgeable there",
            {"not_judgeable": record})


@register("rope_attention_factor")
def attention_factor(ctx: Context) -> None:
    """The attention factor multiplies cos and sin: every rotated pair's norm is scaled by
    0.1 ln s + 1 (YaRN) and sqrt(1 + ln s / ln L0) (LongRoPE), whatever the position."""
    import math

    longrope = {"type": "longrope", "short_factor": [1.0] * (DIM // 2),
                "long_factor": [4.0] * (DIM // 2), "original_max_position_embeddings": 4096,
                "factor": 32.0}
    cases = [({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048},
              0.1 * math.log(4.0) + 1),
             (longrope, math.sqrt(1 + math.log(32.0) / math.log(4096)))]
    x = ctx.normal((6, DIM), 3)
    positions = np.array([0, 1, 100, 4095, 4096, 65535])
    pairs = np.hypot(x[:, : DIM // 2], x[:, DIM // 2 :])
    for scaling, factor in cases:
        out = _rotate(ctx, x, positions, scaling=scaling)
        got = np.hypot(out[:, : DIM // 2], out[:, DIM // 2 :])
        ctx.assert_close(got, factor * pairs, f"pair norms with {scaling['factor']:g}x "
                         f"{scaling.get('rope_type', scaling.get('type'))}",
                         scale=float(factor * pairs.max()), tol=ctx.tol.loosened(2))
