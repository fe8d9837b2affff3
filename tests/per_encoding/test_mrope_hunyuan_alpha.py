"""HunyuanOCR's published rope_scaling (type 'xdrope' with a fixed NTK alpha) passed to mrope as
``scaling``: the golden against transformers' HunYuanVLRotaryEmbedding built from that config
(checked with transformers 5.24), both spellings of the dict, and the readings that go wrong."""

from __future__ import annotations

import contextlib
import copy

import numpy as np
import pytest

with contextlib.suppress(ImportError):
    import torch  # noqa: F401  (before TensorFlow, which has crashed when imported first)

import posenc
from posenc import golden
from posenc.catalog import specs
from posenc.errors import ParameterError

# tencent/HunyuanOCR config.json's rope_scaling (transformers' own test of HunYuanVLTextConfig
# uses the same dict); rope_theta 1e4 and head_dim 128 beside it
HUNYUAN_OCR = {"type": "xdrope", "factor": 1.0, "alpha": 1000.0, "beta_fast": 32, "beta_slow": 1,
               "mscale": 1.0, "mscale_all_dim": 1.0, "xdrope_section": [16, 16, 16, 16]}


def _case():
    return golden.load(specs()["mrope"]).cases["hunyuan_ocr_ntk_alpha"]


def test_the_case_is_the_published_dict() -> None:
    assert _case().params["scaling"] == {**HUNYUAN_OCR, "rope_theta": 10000.0}


@pytest.fixture(scope="module")
def hunyuan_rotary():
    """transformers' HunYuanVL text config and rotary module, built from the legacy dict."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.models.hunyuan_vl.configuration_hunyuan_vl import HunYuanVLTextConfig
    from transformers.models.hunyuan_vl.modeling_hunyuan_vl import (
        HunYuanVLRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    config = HunYuanVLTextConfig(hidden_size=256, num_attention_heads=2, num_key_value_heads=2,
                                 attention_head_dim=128, num_hidden_layers=1,
                                 intermediate_size=64, vocab_size=64, rope_theta=10000.0,
                                 rope_scaling=copy.deepcopy(HUNYUAN_OCR))
    return config, HunYuanVLRotaryEmbedding(config), apply_rotary_pos_emb


@pytest.mark.oracle
def test_golden_vs_transformers_hunyuan_vl(hunyuan_rotary) -> None:
    import torch

    config, rotary, apply_rotary_pos_emb = hunyuan_rotary
    assert rotary.rope_type == "ntk_alpha"  # 'xdrope' -> 'dynamic' -> ntk_alpha with alpha
    assert rotary.mrope_section == [16, 16, 16, 16]
    inv_freq, _ = posenc.rope_frequencies(128, scaling=_case().params["scaling"],
                                          dtype=np.float64)
    # their frequencies are computed in float32
    np.testing.assert_allclose(rotary.inv_freq.double().numpy(), inv_freq, rtol=3e-7, atol=0)
    assert inv_freq[-1] == pytest.approx(1e4 ** (-63 / 64) / 1000, rel=1e-13)

    case = _case()
    x, positions = case.inputs["x"], case.inputs["positions"]
    xt = torch.tensor(x[None], dtype=torch.float32)  # [batch 1, heads 2, seq, 128]
    cos, sin = rotary(xt, torch.tensor(positions[:, None, :]))
    theirs, _ = apply_rotary_pos_emb(xt, xt, cos, sin)
    theirs = theirs[0].double().numpy()
    # float32 frequencies and phases at positions up to 40, |x| up to ~4
    np.testing.assert_allclose(case.output, theirs, rtol=0, atol=3e-5)
    ours = posenc.mrope(x, positions, scaling=case.params["scaling"])
    np.testing.assert_allclose(ours, case.output, rtol=0, atol=1e-12)
    # the dict as transformers stores it (rope_type dynamic, mrope_section): no ordering left
    # in it, so the ordering is named
    normalized = dict(config.rope_parameters)
    assert normalized["rope_type"] == "dynamic" and "xdrope_section" not in normalized
    ours = posenc.mrope(x, positions, scaling=normalized, ordering="xdrope")
    np.testing.assert_allclose(ours, case.output, rtol=0, atol=1e-12)


def test_ignoring_alpha_is_a_different_rotation() -> None:
    """The port that drops alpha (default frequencies at 1e4) turns the low frequencies 1000x
    too fast: at position 40 the outputs differ."""
    case = _case()
    x, positions = case.inputs["x"], case.inputs["positions"]
    plain = posenc.mrope(x, positions, sections=[16, 16, 16, 16], ordering="xdrope")
    assert np.abs(plain - case.output).max() > 1e-2


def test_xdrope_without_alpha_is_refused() -> None:
    x = np.zeros((3, 16))
    with pytest.raises(ParameterError, match=r"scaling\['rope_type'\]='xdrope' depends on the "
                                             r"current sequence length .* nonzero 'alpha'"):
        posenc.mrope(x, np.zeros((4, 3), int), scaling={"type": "xdrope",
                                                        "xdrope_section": [2, 2, 2, 2]})
