"""ggml_rope: llama.cpp's rope (ggml_rope_ext, ggml_rope_multi) written here in float64 closed
form: angle p * freq_base^(-2i/n_dims) / freq_factors[i], YaRN's ramp between freq_scale * theta
and theta with its mscale, the pairings of the normal, neox, M-RoPE, interleaved M-RoPE and
vision modes. ggml builds its angles in float32 (theta *= theta_scale) and rounds cos and sin to
float32, which the reference models; the float64 truth here holds it within that error model."""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc

from .mirror import golden_cases, implementation

EPS32 = float(np.finfo(np.float32).eps)


def _sources(n_pairs: int, mode: str, sections) -> tuple[np.ndarray, np.ndarray]:
    """(which position row drives pair i, the power of theta_scale it takes)."""
    i = np.arange(n_pairs)
    if mode not in ("mrope", "imrope", "vision"):
        return np.zeros(n_pairs, int), i
    s0, s1, s2, _ = sections
    sector = i % sum(sections)
    if mode == "imrope":  # t, h, w interleaved three by three while their sections last
        row = np.select([(sector % 3 == 1) & (sector < 3 * s1), (sector % 3 == 2) & (sector < 3 * s2),
                         (sector % 3 == 0) & (sector < 3 * s0)], [1, 2, 0], 3)
        return row, i
    starts = np.array([0, s0, s0 + s1, s0 + s1 + s2])
    row = np.searchsorted(starts, sector, side="right") - 1
    return row, (sector - starts[row]) if mode == "vision" else i  # vision restarts each section


def _yarn(n_dims: int, p: dict) -> tuple[np.ndarray, float]:
    """(ramp_mix of every pair, YaRN's extra mscale) from ggml_rope_yarn_corr_dims."""
    def corr_dim(rotations: float) -> float:
        return n_dims * math.log(p["n_ctx_orig"] / (rotations * 2 * math.pi)) / (2 * math.log(p["freq_base"]))

    low = max(0, math.floor(corr_dim(p["beta_fast"])))
    high = min(n_dims - 1, math.ceil(corr_dim(p["beta_slow"])))
    n_pairs = n_dims if p["mode"] == "vision" else n_dims // 2
    y = (np.arange(n_pairs) - low) / max(0.001, high - low)
    return (1 - np.clip(y, 0, 1)) * p["ext_factor"], 1 + 0.1 * math.log(1 / p["freq_scale"])


def expected_ggml(x: np.ndarray, positions: np.ndarray, p: dict) -> tuple[np.ndarray, np.ndarray]:
    """(the rotated x in float64, the error bound of ggml's float32 arithmetic at each entry)."""
    dim, mode = x.shape[-1], p["mode"]
    n_dims = p["n_dims"] or (dim // 2 if mode == "vision" else dim)
    n_pairs = n_dims if mode == "vision" else n_dims // 2
    rows, powers = _sources(n_pairs, mode, p["sections"])
    pos = np.asarray(positions, dtype=np.float64).reshape(-1, x.shape[-2])  # [1 or 4, seq]
    extrap = pos[rows].T * np.power(p["freq_base"], -2.0 * powers / n_dims)  # [seq, pairs]
    if p["freq_factors"] is not None:
        extrap = extrap / np.asarray(p["freq_factors"])
    mscale = p["attn_factor"]
    angle = p["freq_scale"] * extrap
    if p["ext_factor"]:
        mix, extra = _yarn(n_dims, p)
        angle, mscale = angle * (1 - mix) + extrap * mix, mscale * extra
    a = 2 * np.arange(n_pairs) if mode == "normal" else np.arange(n_pairs)
    b = a + (1 if mode == "normal" else n_dims if mode == "vision" else n_dims // 2)
    out = np.array(x, dtype=np.float64)
    cos, sin = mscale * np.cos(angle), mscale * np.sin(angle)
    out[..., a], out[..., b] = x[..., a] * cos - x[..., b] * sin, x[..., a] * sin + x[..., b] * cos
    # pair i's float32 angle is i + 1 roundings from theta_scale^i and p (plus YaRN's blend and
    # the freq factor): (i + 4) float32 steps of the angle; cos and sin add a step each
    steps = (np.arange(n_pairs) + 4) * np.abs(extrap) * max(1.0, p["freq_scale"]) + 2
    bound = np.zeros_like(out)
    pair_bound = 2 * EPS32 * abs(mscale) * (np.abs(x[..., a]) + np.abs(x[..., b])) * steps
    bound[..., a], bound[..., b] = pair_bound, pair_bound
    return out, bound


def test_normal_mode_first_pair_turns_by_the_position() -> None:
    """n_dims 4, position 3: pair 0 (features 0, 1) by 3 radians, pair 1 by 3/100; ggml's cos and
    sin are float32."""
    x = np.array([[1.0, 0.0, 0.0, 1.0]])
    out = posenc.ggml_rope(x, np.array([3]))
    expected = [math.cos(3), math.sin(3), -math.sin(0.03), math.cos(0.03)]
    np.testing.assert_allclose(out[0], expected, rtol=0, atol=2 * EPS32)


@pytest.mark.parametrize("case", golden_cases("ggml_rope"), ids=lambda c: c.name)
def test_reference_and_implementation_within_float32_of_the_closed_form(case) -> None:
    expected, bound = expected_ggml(case.inputs["x"], case.inputs["positions"], case.params)
    for name, got in (("reference", case.output), ("implementation", implementation("ggml_rope", case))):
        excess = np.abs(np.asarray(got) - expected) - bound
        assert np.all(excess <= 1e-12), (name, np.unravel_index(np.argmax(excess), excess.shape))
