"""Oracle: transformers' Llama 4 text rope (Llama4TextRotaryEmbedding's complex freqs_cis and
apply_rotary_emb, which multiplies q and k viewed as complex numbers: pairs (2i, 2i + 1))
against posenc.rope with layout='interleaved' and the same rope_parameters, on Llama 4
Scout's configuration (meta-llama/Llama-4-Scout-17B-16E text_config: head_dim 128, rope_theta
5e5, llama3 factor 16 with low_freq_factor = high_freq_factor = 1, an empty smoothing band)."""

from __future__ import annotations

import numpy as np
import pytest

import posenc

torch = pytest.importorskip("torch")
llama4 = pytest.importorskip("transformers.models.llama4.modeling_llama4")

EPS32 = 2.0**-24
SCOUT_ROPE = {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0,
              "high_freq_factor": 1.0, "original_max_position_embeddings": 8192,
              "rope_theta": 500000.0}
POSITIONS = [[0, 1, 2, 37, 200, 8191, 8192, 100000], [5, 6, 7, 8, 9, 10, 11, 12]]


def _module():
    from transformers.models.llama4.configuration_llama4 import Llama4TextConfig

    config = Llama4TextConfig(hidden_size=5120, num_attention_heads=40, head_dim=128,
                              num_key_value_heads=8, max_position_embeddings=10485760,
                              rope_parameters=dict(SCOUT_ROPE))
    return llama4.Llama4TextRotaryEmbedding(config)


@pytest.mark.oracle
def test_scout_inv_freq_and_attention_factor() -> None:
    module = _module()
    inv_freq, attention = posenc.rope_frequencies(128, scaling=SCOUT_ROPE)
    np.testing.assert_allclose(module.inv_freq.double().numpy(), np.asarray(inv_freq),
                               rtol=5e-7)
    assert module.attention_scaling == attention == 1.0
    plain, _ = posenc.rope_frequencies(128, base=500000.0)
    assert np.any(np.abs(np.asarray(inv_freq) - np.asarray(plain)) > 1e-3 * np.asarray(plain))


@pytest.mark.oracle
def test_scout_rotation_equals_posenc_interleaved() -> None:
    """q and k rotated by transformers (float32 complex products, angles m·θ in float32)
    equal posenc's interleaved rope in float64 within the float32 angle error of each token;
    a half-layout or an unscaled rope is far off."""
    module = _module()
    generator = torch.Generator().manual_seed(4101)
    batch, seq, heads, dim = 2, len(POSITIONS[0]), 3, 128
    q = torch.randn(batch, seq, heads, dim, generator=generator)
    k = torch.randn(batch, seq, heads, dim, generator=generator)
    position_ids = torch.tensor(POSITIONS)
    q_out, k_out = llama4.apply_rotary_emb(q, k, module(q, position_ids))

    positions = np.array(POSITIONS)
    for x, theirs in ((q, q_out), (k, k_out)):
        x64 = x.double().numpy().transpose(0, 2, 1, 3)  # posenc: [batch, heads, seq, dim]
        theirs64 = theirs.double().numpy().transpose(0, 2, 1, 3)

        def ours(x64=x64, theirs64=theirs64, **kw):
            out = posenc.rope(x64, positions, **kw)
            return np.abs(out - theirs64).max(axis=(1, 3))  # [batch, seq]

        err = ours(layout="interleaved", scaling=SCOUT_ROPE)
        # angles m·θ_i in float32 (inv_freq and the product each a few ulps): |Δφ| <= 8 eps m
        # at θ_0 = 1, plus an ulp of cos, sin and the complex product; pairs have norm <= √2 max
        bound = np.abs(x64).max() * np.sqrt(2) * (8 * EPS32 * np.abs(positions) + 8 * EPS32)
        assert np.all(err <= bound), (err, bound)
        # where the bound leaves room (not at 100000), a half-layout rope and an unscaled one
        # are far off: layout from position 1, the scaled low frequencies from a few dozen on
        usable = bound < 0.05
        scaled = usable & (positions >= 37)
        assert scaled.sum() >= 4
        half = ours(layout="half", scaling=SCOUT_ROPE)
        assert np.all(half[usable & (positions > 0)] > 10 * bound[usable & (positions > 0)])
        unscaled = ours(layout="interleaved", base=500000.0)
        assert np.all(unscaled[scaled] > 10 * bound[scaled])
