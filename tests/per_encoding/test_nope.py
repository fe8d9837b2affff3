"""NoPE: bad inputs on every backend, the golden against transformers' Llama 4 NoPE layers
(queries and keys reach attention unrotated; no_rope_layers 1 means the layer HAS rope), and
the properties catching an implementation that rotates."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from posenc import catalog, golden
from posenc.catalog import specs
from posenc.errors import ParameterError
from posenc.reference.rope import rope as rope_reference

X = np.linspace(-1, 1, 2 * 6 * 8).reshape(2, 6, 8)


@pytest.mark.parametrize(
    ("x", "message"),
    [
        (X[0, 0], r"x must have shape \[..., seq, dim\], got shape \(8,\)"),
        (np.ones((6, 8), np.int64), r"x must have a real floating dtype, got int(32|64)"),
    ],
)
def test_bad_input_raises_a_parameter_error_naming_it(pe, x, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.nope(x, np.arange(6))


def test_returns_x_on_every_backend(pe) -> None:
    x = X.astype(np.float32)  # JAX without x64 has no float64
    out = np.asarray(pe.nope(x, np.arange(6) + 10**5))
    np.testing.assert_array_equal(out, x)


def _llama4_layers(seed: int = 0):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.models.llama4.configuration_llama4 import Llama4TextConfig
    from transformers.models.llama4.modeling_llama4 import (
        Llama4TextAttention,
        Llama4TextRotaryEmbedding,
    )

    config = Llama4TextConfig(
        hidden_size=32, num_attention_heads=2, num_key_value_heads=2, head_dim=16,
        num_hidden_layers=2, no_rope_layers=[1, 0], attn_temperature_tuning=False,
        use_qk_norm=False, intermediate_size=64, intermediate_size_mlp=64, vocab_size=32,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    layers = [Llama4TextAttention(config, i).double().eval() for i in range(2)]
    return torch, config, layers, Llama4TextRotaryEmbedding(config)


def _weights_from_qk(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    scores = np.einsum("hsd,htd->hst", q, k) / np.sqrt(q.shape[-1])
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    return scores / scores.sum(-1, keepdims=True)


def test_every_golden_case_is_the_identity() -> None:
    """The golden of each case is x itself (a check on the reference and the goldens)."""
    for case in golden.load(specs()["nope"]).cases.values():
        np.testing.assert_array_equal(case.output, case.inputs["x"])


def test_oracle_transformers_llama4_nope_layer() -> None:
    """Llama4TextAttention with no_rope_layers[i] = 0 computes its attention weights from
    unrotated queries and keys: softmax(nope(q) nope(k)ᵀ/√d) with posenc.nope; the layer with
    flag 1 rotates them (transformers' RoPE, half layout of Llama 4's complex pairs aside)."""
    torch, _, layers, rotary = _llama4_layers()
    rng = np.random.default_rng(7)
    hidden = torch.tensor(rng.standard_normal((1, 6, 32)))
    positions = torch.arange(6)[None]
    freqs = rotary(hidden.float(), positions)
    with torch.no_grad():
        outs = [layer(hidden, freqs, None)[1][0].numpy() for layer in layers]
        q = layers[1].q_proj(hidden).view(1, 6, 2, 16).transpose(1, 2)[0].numpy()
        k = layers[1].k_proj(hidden).view(1, 6, 2, 16).transpose(1, 2)[0].numpy()
    expected = _weights_from_qk(posenc.nope(q, np.arange(6)), posenc.nope(k, np.arange(6)))
    np.testing.assert_allclose(outs[1], expected, rtol=1e-6, atol=1e-9)
    assert np.abs(outs[0] - expected).max() > 1e-3, "the rope layer (flag 1) should rotate"


def test_diagnosis_rope_on_nope_layer_is_what_a_rotating_layer_computes() -> None:
    """The declared diagnosis is RoPE at theta 10000 over the positions: the polarity bug."""
    from posenc.diagnoses import evaluate

    spec = specs()["nope"]
    (diagnosis,) = spec.diagnoses
    case = golden.load(spec).cases["queries_with_positions"]
    out = evaluate(diagnosis, catalog.reference_function(spec), case.inputs, {})
    truth = rope_reference(case.inputs["x"], case.inputs["positions"], base=10000.0,
                           layout="half", rotary_dim=None, scaling=None, seq_len=None)
    np.testing.assert_allclose(out, truth, rtol=0, atol=1e-12)
    assert np.abs(out - case.output).max() > 0.1
