"""The shrunk configs of ``posenc sweep transformers`` (conformance/sweeps/transformers_configs.py):
a config class that rejects the shrunk sizes gets them made consistent, keyed by the message it
raises, never by the family's name."""
from __future__ import annotations

import pytest

from posenc.conformance.sweeps import transformers_configs as configs

VALUES = {"hidden_size": 4096, "mamba_expand": 2, "mamba_n_heads": 128, "mamba_d_head": 64,
          "num_hidden_layers": 6, "layers_block_type": ["mamba"] * 5 + ["hybrid"],
          "hybrid_layer_ids": [5], "flow_head_config": {"condition_dim": 1024, "depth": 3}}
SHRUNK = {"hidden_size": 64, "mamba_n_heads": 4, "mamba_d_head": 32, "num_hidden_layers": 2,
          "num_experts_per_tok": 2}


def test_mamba_heads_tile_the_mamba_width() -> None:
    fixed = configs._repaired({**SHRUNK, "mamba_d_head": 8}, VALUES, ValueError(
        "The dimensions for the Mamba head state do not match the model intermediate_size"))
    assert fixed is not None and fixed["mamba_n_heads"] * fixed["mamba_d_head"] == 2 * 64
    with_ssm = configs._repaired(SHRUNK, {**VALUES, "mamba_d_ssm": 1024}, ValueError(
        "Mamba head state do not match"))
    assert with_ssm is not None and with_ssm["mamba_d_ssm"] is None  # the product rules


def test_a_flow_head_is_conditioned_on_the_shrunk_hidden_size() -> None:
    fixed = configs._repaired(SHRUNK, VALUES, ValueError(
        "`flow_head_config.condition_dim` (1024) must equal the backbone `hidden_size` (64)."))
    assert fixed is not None
    assert fixed["flow_head_config"] == {"condition_dim": 64, "depth": 3}


def test_per_layer_lists_follow_the_shrunk_depth() -> None:
    fixed = configs._repaired(SHRUNK, VALUES, ValueError(
        "`num_hidden_layers` (2) must be equal to the number of `layer_types` (6)"))
    assert fixed is not None and fixed["layers_block_type"] == ["mamba", "mamba"]
    assert "hybrid_layer_ids" not in fixed  # a list of indices, not one entry per layer


def test_an_unsupported_size_goes_back_to_its_default() -> None:
    fixed = configs._repaired(SHRUNK, VALUES, ValueError(
        "ZAYA currently supports `num_experts_per_tok=1` only."))
    assert fixed is not None and "num_experts_per_tok" not in fixed
    assert fixed["hidden_size"] == 64


def test_a_size_that_must_divide_becomes_a_multiple() -> None:
    fixed = configs._repaired({**SHRUNK, "index_topk": 4}, VALUES, ValueError(
        "index_topk (4) must be divisible by index_kpool (16)."))
    assert fixed is not None and fixed["index_topk"] == 16


def test_a_nope_attention_keeps_its_zero_rope_slice() -> None:
    fixed = configs._repaired({**SHRUNK, "qk_rope_head_dim": 8}, VALUES, ValueError(
        "Expecting NoPE for the DSA attention layers, but got 8 as RoPE dim."))
    assert fixed is not None and "qk_rope_head_dim" not in fixed


def test_other_errors_are_not_repaired() -> None:
    assert configs._repaired(SHRUNK, VALUES, ValueError("head_dim must be even")) is None
    assert configs._repaired(SHRUNK, VALUES, ValueError("supports nothing named")) is None


@pytest.mark.parametrize("model_type", ["bamba", "falcon_h1", "zamba2", "zaya", "pocket_tts",
                                        "kimi_linear"])
def test_the_families_that_rejected_their_shrunk_config_now_build(model_type: str) -> None:
    pytest.importorskip("transformers")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config = configs.tiny_config(CONFIG_MAPPING[model_type])
    assert config.num_hidden_layers <= configs.MAX_LAYERS
    assert config.hidden_size <= 256
