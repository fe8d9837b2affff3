"""Properties of the RoPE frequency schedules (inv_freq followed by the attention factor)."""

from __future__ import annotations

import numpy as np

from ..context import CheckFailure, Context
from . import register

DIM = 64


def _frequencies(ctx: Context, scaling: dict | None = None, seq_len: int | None = None,
                 dim: int = DIM) -> tuple[np.ndarray, float]:
    out = ctx.run({}, dim=dim, scaling=scaling, seq_len=seq_len)
    return out[:-1], float(out[-1])


def _default(dim: int = DIM, base: float = 10000.0) -> np.ndarray:
    return base ** (-2.0 * np.arange(dim // 2) / dim)


def _close(ctx: Context, got: np.ndarray, expected: np.ndarray, what: str) -> None:
    ctx.assert_close(got, expected, what, scale=float(np.abs(expected).max()),
                     tol=ctx.tol.loosened(4))


def _factor_is_one(ctx: Context, factor: float, what: str) -> None:
    if abs(factor - 1.0) > 1e-12:
        raise CheckFailure(f"{what}: attention factor {factor!r}, expected 1")


@register("rope_frequencies_linear_divides")
def linear_divides(ctx: Context) -> None:
    """linear(s) divides every default frequency by s and keeps the attention factor 1."""
    for s in (2.0, 4.0, 8.0):
        got, factor = _frequencies(ctx, {"rope_type": "linear", "factor": s})
        _close(ctx, got, _default() / s, f"linear factor {s:g}")
        _factor_is_one(ctx, factor, "linear")


@register("rope_frequencies_dynamic_within")
def dynamic_within(ctx: Context) -> None:
    """Dynamic NTK equals default while seq_len <= max_position_embeddings (and for
    seq_len None); beyond it (here 4x) every frequency but theta_0 = 1 shrinks."""
    scaling = {"type": "dynamic", "factor": 4.0, "max_position_embeddings": 2048}
    for seq_len in (None, 1, 1024, 2048):
        got, factor = _frequencies(ctx, scaling, seq_len)
        _close(ctx, got, _default(), f"dynamic at seq_len={seq_len}")
        _factor_is_one(ctx, factor, "dynamic")
    got, _ = _frequencies(ctx, scaling, 8192)
    plain = _default()
    if got[0] != 1.0 or not np.all(got[1:] < plain[1:]):
        raise CheckFailure(f"dynamic at seq_len=8192: expected theta_0 = 1 and smaller "
                           f"frequencies after it, got {got[:4]} vs default {plain[:4]}")


@register("rope_frequencies_yarn_factor_one")
def yarn_factor_one(ctx: Context) -> None:
    """YaRN with factor 1 is the default schedule, attention factor 1, whatever the betas."""
    for extra in ({}, {"beta_fast": 16, "beta_slow": 2}, {"truncate": False}):
        got, factor = _frequencies(ctx, {"rope_type": "yarn", "factor": 1.0,
                                         "original_max_position_embeddings": 4096, **extra})
        _close(ctx, got, _default(), f"yarn factor 1 {extra}")
        _factor_is_one(ctx, factor, "yarn factor 1")


@register("rope_frequencies_llama3_bands")
def llama3_bands(ctx: Context) -> None:
    """Llama 3.1: wavelengths below L0/high_freq_factor keep their frequency, those above
    L0/low_freq_factor are divided by the factor, the band between lies in between."""
    s, trained, low, high = 8.0, 8192, 1.0, 4.0
    scaling = {"rope_type": "llama3", "factor": s, "low_freq_factor": low,
               "high_freq_factor": high, "original_max_position_embeddings": trained}
    for base in (10000.0, 500000.0):
        got, factor = _frequencies(ctx, {**scaling, "rope_theta": base}, dim=128)
        plain = _default(128, base)
        wavelength = 2 * np.pi / plain
        keep, divide = wavelength < trained / high, wavelength > trained / low
        if not (keep.any() and divide.any()):
            raise CheckFailure("llama3 check needs both bands")
        _close(ctx, got[keep], plain[keep], "llama3 high-frequency band")
        _close(ctx, got[divide], plain[divide] / s, "llama3 low-frequency band")
        middle = ~keep & ~divide
        slack = 1 + 4 * ctx.tol.rtol
        if np.any(got[middle] > plain[middle] * slack) or np.any(
                got[middle] < plain[middle] / s / slack):
            raise CheckFailure("llama3 middle band outside [theta/s, theta]")
        # the blend weight is linear in the rotations over L0 (L0 / wavelength), from 0 at
        # L0/low_freq_factor to 1 at L0/high_freq_factor (not linear in the wavelength)
        smooth = (trained / wavelength[middle] - low) / (high - low)
        blend = (1 - smooth) * plain[middle] / s + smooth * plain[middle]
        _close(ctx, got[middle], blend, "llama3 middle band blend")
        _factor_is_one(ctx, factor, "llama3")


@register("rope_frequencies_yarn_ramp")
def yarn_ramp(ctx: Context) -> None:
    """YaRN (NTK-by-parts): pair i keeps theta_i while it turns at least beta_fast times over
    L0, is divided by s once it turns at most beta_slow times, and blends linearly in i in
    between, from floor of the fast correction dim to ceil of the slow one (clamped to
    [0, r - 1], r the rotary width: with a long L0 the ramp can end short of 1). The attention
    factor is an explicit attention_factor as given, else 0.1 ln s + 1."""
    configs = [(32, 10000.0, 4.0, 4096, 32.0, 1.0), (64, 10000.0, 8.0, 2048, 16.0, 2.0),
               (128, 1000000.0, 4.0, 32768, 32.0, 1.0), (32, 10000.0, 4.0, 131072, 32.0, 1.0),
               (64, 500000.0, 40.0, 4096, 4.0, 1.0)]
    for r, base, s, trained, fast, slow in configs:
        scaling = {"rope_type": "yarn", "factor": s, "original_max_position_embeddings": trained,
                   "beta_fast": fast, "beta_slow": slow, "rope_theta": base}
        got, factor = _frequencies(ctx, scaling, dim=r)
        plain = _default(r, base)
        rotations = trained * plain / (2 * np.pi)  # turns of pair i over L0

        def correction_dim(turns: float, r: int = r, base: float = base,
                           trained: int = trained) -> float:
            return r * np.log(trained / (2 * np.pi * turns)) / (2 * np.log(base))

        lo = max(np.floor(correction_dim(fast)), 0.0)
        hi = min(np.ceil(correction_dim(slow)), r - 1.0)
        ramp = np.clip((np.arange(r // 2) - lo) / (hi - lo), 0.0, 1.0)
        what = f"yarn r={r} base={base:g} s={s:g} L0={trained} betas=({fast:g}, {slow:g})"
        if np.any(ramp[rotations >= fast] != 0.0) or np.any(ramp[rotations <= slow] != 1.0):
            raise CheckFailure(f"{what}: the property's own ramp is inconsistent")
        _close(ctx, got, plain * (1 - ramp) + plain / s * ramp, what)
        expected = 0.1 * np.log(s) + 1.0
        if abs(factor - expected) > 1e-12 * expected:
            raise CheckFailure(f"{what}: attention factor {factor!r}, expected 0.1 ln s + 1 = "
                               f"{expected!r}")
        _, factor = _frequencies(ctx, {**scaling, "attention_factor": 1.25}, dim=r)
        if factor != 1.25:
            raise CheckFailure(f"{what}: attention factor {factor!r} with an explicit "
                               "attention_factor 1.25 (it is used as given)")


@register("rope_frequencies_longrope_switch")
def longrope_switch(ctx: Context) -> None:
    """LongRoPE divides by the short factors up to seq_len = original_max_position_embeddings
    (and for seq_len None) and by the long factors strictly beyond it."""
    short = [1.0 + 0.1 * i for i in range(DIM // 2)]
    long = [2.0 + i for i in range(DIM // 2)]
    scaling = {"type": "longrope", "short_factor": short, "long_factor": long,
               "original_max_position_embeddings": 4096, "factor": 16.0}
    for seq_len, factors in ((None, short), (1, short), (4096, short), (4097, long),
                             (10**6, long)):
        got, _ = _frequencies(ctx, scaling, seq_len)
        _close(ctx, got, _default() / np.array(factors), f"longrope at seq_len={seq_len}")


@register("rope_frequencies_ntk_matches_dynamic")
def ntk_matches_dynamic(ctx: Context) -> None:
    """Static NTK with factor s is dynamic NTK at the length where s*L/L_max - (s - 1) = s,
    i.e. L = L_max (2s - 1)/s; both raise the base to the power d/(d - 2)."""
    trained = 2048
    for s in (2.0, 4.0):
        length = int(trained * (2 * s - 1) / s)
        ntk, _ = _frequencies(ctx, {"rope_type": "ntk", "factor": s})
        dynamic, _ = _frequencies(ctx, {"type": "dynamic", "factor": s,
                                        "max_position_embeddings": trained}, length)
        _close(ctx, ntk, dynamic, f"ntk({s:g}) vs dynamic at seq_len={length}")
        _close(ctx, ntk, _default(DIM, 10000.0 * s ** (DIM / (DIM - 2))), f"ntk({s:g})")
