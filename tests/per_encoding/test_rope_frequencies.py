"""rope_frequencies: the RoPE frequency schedules of transformers' ROPE_INIT_FUNCTIONS written here
once more, vectorised over the pair index in float64 (posenc's reference goes one frequency at a
time), against every golden case and the implementation; Llama 3.1's three bands by hand."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import posenc

from .mirror import golden_cases, implementation


def _kind(scaling: dict[str, Any]) -> str:
    name = scaling.get("rope_type", scaling.get("type", "default"))
    name = {"mrope": "default", "xdrope": "dynamic"}.get(name, name)
    return "ntk_alpha" if name == "dynamic" and scaling.get("alpha") else name


def _mscale(s: float, m: float = 1.0) -> float:
    return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0


def _yarn(theta: np.ndarray, r: int, base: float, s: dict[str, Any]) -> tuple[np.ndarray, float]:
    factor = s.get("factor") or s["max_position_embeddings"] / s["original_max_position_embeddings"]
    trained = s["original_max_position_embeddings"]

    def correction_dim(rotations: float) -> float:  # pair index turning that often over L0
        return r * math.log(trained / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(s.get("beta_fast") or 32), correction_dim(s.get("beta_slow") or 1)
    if s.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, r - 1)
    ramp = np.clip((np.arange(r // 2) - low) / ((high - low) or 0.001), 0, 1)
    attention = s.get("attention_factor")
    if attention is None:
        m, m_all = s.get("mscale"), s.get("mscale_all_dim")
        attention = _mscale(factor, m) / _mscale(factor, m_all) if m and m_all else _mscale(factor)
    return theta * (1 - ramp) + theta / factor * ramp, attention


def _llama3(theta: np.ndarray, s: dict[str, Any]) -> np.ndarray:
    factor, trained = s["factor"], s["original_max_position_embeddings"]
    low, high = s["low_freq_factor"], s["high_freq_factor"]
    wavelength = 2 * math.pi / theta
    smooth = (trained / wavelength - low) / (high - low) if high != low else np.ones_like(theta)
    blended = (1 - smooth) * theta / factor + smooth * theta
    return np.where(wavelength < trained / high, theta,
                    np.where(wavelength > trained / low, theta / factor, blended))


def expected_schedule(dim: int, base: float, scaling: dict[str, Any] | None,
                      seq_len: int | None) -> tuple[np.ndarray, float]:
    s = dict(scaling or {})
    name = _kind(s)
    base = float(s.get("rope_theta") or base)
    r = dim if name == "proportional" else int(dim * s.get("partial_rotary_factor", 1.0))
    exponent = 2.0 * np.arange(r // 2) / r

    def theta(b: float) -> np.ndarray:
        return np.power(b, -exponent)

    if name == "linear":
        return theta(base) / s["factor"], 1.0
    if name in ("ntk", "ntk_alpha"):
        return theta(base * s["factor" if name == "ntk" else "alpha"] ** (r / (r - 2))), 1.0
    if name == "dynamic":
        trained = s.get("max_position_embeddings") or s["original_max_position_embeddings"]
        length = max(seq_len or trained, trained)
        return theta(base * (s["factor"] * length / trained - (s["factor"] - 1)) ** (r / (r - 2))), 1.0
    if name == "yarn":
        return _yarn(theta(base), r, base, s)
    if name == "llama3":
        return _llama3(theta(base), s), 1.0
    if name == "longrope":
        trained = s["original_max_position_embeddings"]
        factors = s["long_factor"] if seq_len is not None and seq_len > trained else s["short_factor"]
        factor = s.get("factor") or s["max_position_embeddings"] / trained
        attention = s.get("attention_factor")
        if attention is None:
            attention = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(trained))
        return theta(base) / np.asarray(factors), attention
    if name == "proportional":
        rotated = int(s.get("partial_rotary_factor", 1.0) * r // 2)
        kept = np.arange(r // 2) < rotated
        return np.where(kept, theta(base), 0.0) / (s.get("factor") or 1.0), 1.0
    return theta(base), 1.0


def test_llama_3_1_bands_by_hand() -> None:
    """Llama 3.1 (theta 500000, factor 8, L0 8192, bands 1 and 4): the fastest frequency, 1, is
    kept; the slowest (wavelength 2 pi 500000^(126/128) > 8192) is divided by 8."""
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    inv_freq, attention = posenc.rope_frequencies(128, base=500000.0, scaling=scaling,
                                                  dtype=np.float64)
    assert inv_freq[0] == 1.0 and attention == 1.0
    np.testing.assert_allclose(inv_freq[-1], 500000.0 ** (-126 / 128) / 8, rtol=1e-14)
    wavelength = 2 * math.pi / (500000.0 ** (-np.arange(64) / 64))
    middle = (wavelength >= 8192 / 4) & (wavelength <= 8192)
    theta = 500000.0 ** (-np.arange(64) / 64)
    assert np.all((inv_freq[middle] < theta[middle]) & (inv_freq[middle] > theta[middle] / 8))


@pytest.mark.parametrize("case", golden_cases("rope_frequencies"), ids=lambda c: c.name)
def test_reference_and_implementation_match_the_vectorised_schedule(case) -> None:
    p = case.params
    inv_freq, attention = expected_schedule(p["dim"], p["base"], p["scaling"], p["seq_len"])
    expected = np.concatenate([inv_freq, [attention]])
    np.testing.assert_allclose(case.output, expected, rtol=1e-14, atol=0)
    ours, factor = implementation("rope_frequencies", case)
    np.testing.assert_allclose(np.concatenate([np.asarray(ours), [factor]]), expected, rtol=1e-14,
                               atol=0)
