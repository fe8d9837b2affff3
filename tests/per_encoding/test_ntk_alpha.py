"""Hunyuan's NTK-alpha (rope_frequencies' ntk_alpha): the goldens against transformers'
HunYuanDenseV1RotaryEmbedding (checked with transformers 5.24), its reading of a 'dynamic'
dict with alpha, and bad dicts on every backend."""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np
import pytest

with contextlib.suppress(ImportError):
    import torch  # noqa: F401  (before TensorFlow, see tests/peers/test_oracles.py)

import posenc
from posenc import golden
from posenc.catalog import specs
from posenc.encodings.rope_frequencies import schedule_type
from posenc.errors import ParameterError
from posenc.specs import resolve_params

# Hunyuan-A13B's config.json rope_scaling, as published (head_dim 128, rope_theta 1e4)
HUNYUAN_A13B = {"alpha": 1000.0, "beta_fast": 32, "beta_slow": 1, "factor": 1.0,
                "mscale": 1.0, "mscale_all_dim": 1.0, "type": "dynamic"}


def _alpha_cases() -> dict[str, tuple[golden.GoldenCase, dict[str, Any]]]:
    spec = specs()["rope_frequencies"]
    loaded = golden.load(spec)
    cases = {name: (case, resolve_params(spec, case.params))
             for name, case in loaded.cases.items()}
    return {name: (case, p) for name, (case, p) in cases.items()
            if schedule_type(p["scaling"]) == "ntk_alpha"}


def test_the_spec_has_both_spellings() -> None:
    kinds = {(p["scaling"].get("rope_type") or p["scaling"].get("type"))
             for _, p in _alpha_cases().values()}
    assert kinds == {"dynamic", "ntk_alpha"}


def test_by_hand_first_and_last_frequency() -> None:
    """base' = 1e4 * 1000^(128/126): theta_0 = 1, theta_63 = base'^(-126/128) = 1e4^(-63/64)/1000."""
    inv_freq, attention = posenc.rope_frequencies(128, scaling=HUNYUAN_A13B, dtype=np.float64)
    assert inv_freq[0] == 1.0
    assert inv_freq[-1] == pytest.approx(1e4 ** (-63 / 64) / 1000, rel=1e-13)
    assert attention == 1.0


@pytest.mark.oracle
@pytest.mark.parametrize("name", sorted(_alpha_cases()))
def test_ntk_alpha_vs_transformers_hunyuan(name: str) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import HunYuanDenseV1Config
    from transformers.models.hunyuan_v1_dense.modeling_hunyuan_v1_dense import (
        HunYuanDenseV1RotaryEmbedding as Rotary,
    )

    case, params = _alpha_cases()[name]
    dim = params["dim"]
    rope = {k: v for k, v in params["scaling"].items() if k != "max_position_embeddings"}
    rope.setdefault("rope_theta", params["base"])
    config = HunYuanDenseV1Config(hidden_size=2 * dim, num_attention_heads=2, head_dim=dim,
                                  num_hidden_layers=1, max_position_embeddings=4096,
                                  rope_parameters=rope)
    rotary = Rotary(config)
    assert rotary.rope_type == "ntk_alpha"  # transformers reads 'dynamic' + alpha the same way
    inv_freq, attention = Rotary.compute_ntk_alpha_rope_parameters(config)
    expected = np.concatenate([inv_freq.to(torch.float64).numpy(), [attention]])
    assert case.output.shape == expected.shape
    np.testing.assert_allclose(case.output[:-1], expected[:-1], rtol=5e-7, atol=0,
                               err_msg=f"rope_frequencies/{name} vs transformers Hunyuan")
    assert case.output[-1] == expected[-1] == 1.0
    # the module stays static past max_position_embeddings: 'dynamic' does not rescale it
    positions = np.arange(65528, 65536)
    cos, sin = rotary(torch.zeros(1), torch.from_numpy(positions[None]))
    x = np.zeros((8, dim))
    x[:, : dim // 2] = 1.0
    got = posenc.rope(x, positions, scaling=rope, seq_len=65536)
    want = np.concatenate([cos.double().numpy()[0, :, : dim // 2],
                           sin.double().numpy()[0, :, : dim // 2]], axis=-1)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 + 8 * 1.2e-7 * 65536)


def test_reading_the_label_as_dynamic_ntk_is_a_different_schedule() -> None:
    """The porting bug: the same dict without alpha's reading keeps the default frequencies up to
    max_position_embeddings, where Hunyuan's lowest frequency is 1000x lower."""
    ours, _ = posenc.rope_frequencies(128, scaling=HUNYUAN_A13B, dtype=np.float64)
    as_dynamic = {"type": "dynamic", "factor": 1.0, "max_position_embeddings": 32768}
    theirs, _ = posenc.rope_frequencies(128, scaling=as_dynamic, seq_len=32768,
                                        dtype=np.float64)
    assert theirs[-1] / ours[-1] == pytest.approx(1000.0, rel=1e-12)


@pytest.mark.parametrize(
    ("scaling", "message"),
    [
        ({**HUNYUAN_A13B, "partial_rotary_factor": 0.5},
         r"partial_rotary_factor'\]=0.5 with rope_type='ntk_alpha': .* whole head"),
        ({"rope_type": "ntk_alpha", "alpha": -2.0}, r"scaling\['alpha'\]=-2.0 must be finite"),
        ({"rope_type": "ntk_alpha", "alpha": math.nan}, r"scaling\['alpha'\]=nan must be"),
        ({"rope_type": "ntk_alpha", "alpha": "1000"},
         r"scaling\['alpha'\] must be a number, got '1000'"),
        ({"rope_type": "ntk_alpha"}, r"rope_type='ntk_alpha' is missing 'alpha'"),
        ({"rope_type": "ntk_alpha", "alpha": 1e300},
         r"scaling\['alpha'\]=1e\+300 with rope_type='ntk_alpha': the scaled base .* overflows"),
        ({"rope_type": "ntk", "factor": 1e308},
         r"scaling\['factor'\]=1e\+308 with rope_type='ntk': the scaled base .* overflows"),
        ({"rope_type": "ntk_alpha", "alpha": 2.0, "low_freq_factor": 1.0},
         r"key 'low_freq_factor', which rope_type='ntk_alpha' does not use"),
        # alpha 0 is falsy: transformers falls back to dynamic, where alpha is an unused key
        ({"type": "dynamic", "alpha": 0.0, "factor": 2.0, "max_position_embeddings": 16},
         r"key 'alpha', which rope_type='dynamic' does not use"),
    ],
)
def test_bad_ntk_alpha(pe, scaling, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.rope_frequencies(8, scaling=scaling)
    with pytest.raises(ParameterError, match=message):
        pe.rope(np.zeros((2, 8)), scaling=scaling)


def test_hunyuan_config_translates_to_every_dialect() -> None:
    """A Hunyuan-A13B-shaped config.json (legacy rope_scaling beside rope_theta): ggml gets the
    scaled freq_base, vLLM 'dynamic' with alpha, ONNX caches from the ntk_alpha frequencies."""
    from posenc.dialects import translate

    config = {"head_dim": 128, "hidden_size": 4096, "num_attention_heads": 32,
              "max_position_embeddings": 32768, "rope_theta": 10000.0,
              "rope_scaling": {k: v for k, v in HUNYUAN_A13B.items()}}
    scaled = 10000.0 * 1000.0 ** (128 / 126)
    ggml = translate(config, "ggml")["all"]
    assert ggml["freq_base"] == pytest.approx(scaled, rel=1e-14)
    assert ggml["freq_scale"] == 1.0 and ggml["freq_factors"] is None
    vllm = translate(config, "vllm")["all"]["rope_parameters"]
    assert vllm == {"rope_type": "dynamic", "alpha": 1000.0, "rope_theta": 10000.0}
    onnx = translate(config, "onnx", max_positions=4)["all"]
    inv_freq, _ = posenc.rope_frequencies(128, scaling=HUNYUAN_A13B, dtype=np.float64)
    np.testing.assert_allclose(onnx["cos_cache"][3], np.cos(3 * inv_freq), rtol=0, atol=1e-15)
