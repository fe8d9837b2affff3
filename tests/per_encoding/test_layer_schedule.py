"""Layer schedules: bad configs (ParameterError naming the key and the value), the dict API,
and every golden case against transformers 5.x: the config classes built from the case (tiny
widths), their attention modules (use_rope, sliding_window) and rotary embeddings (inv_freq per
layer type, compared with posenc.rope_frequencies of the per-layer dict)."""

from __future__ import annotations

import copy
import importlib

import numpy as np
import pytest

import posenc
from posenc import golden
from posenc.catalog import specs
from posenc.encodings.rope_frequencies import SCHEDULES
from posenc.errors import ParameterError, Unsupported

LLAMA4 = {"model_type": "llama4_text", "num_hidden_layers": 4, "no_rope_layers": [1, 1, 0, 1]}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ([1, 2], r"config=\[1, 2\] must be a dict"),
        ({"num_hidden_layers": 4}, r"config has no 'model_type'"),
        ({"model_type": "llama"}, r"config\['model_type'\]='llama' has no layer schedule"),
        ({"model_type": "cohere2"}, r"config has no 'num_hidden_layers': the cohere2 schedule"),
        ({"model_type": "cohere2", "num_hidden_layers": 0},
         r"config\['num_hidden_layers'\]=0 must be an int >= 1"),
        ({**LLAMA4, "no_rope_layers": [1, 0]},
         r"config\['no_rope_layers'\]=\[1, 0\] must list a 0/1 flag for each of the "
         r"num_hidden_layers=4 layers"),
        ({**LLAMA4, "no_rope_layers": [1, 2, 0, 1]}, r"config\['no_rope_layers'\]\[1\]=2 must be 0"),
        ({**LLAMA4, "layer_types": ["full_attention"] * 3},
         r"config\['layer_types'\]=\[.*\] must list one type per layer \(num_hidden_layers=4\)"),
        ({**LLAMA4, "layer_types": ["full_attention"] * 3 + ["global"]},
         r"config\['layer_types'\]\[3\]='global' is not one of"),
        ({"model_type": "gemma3_text", "num_hidden_layers": 6, "sliding_window_pattern": 0},
         r"config\['sliding_window_pattern'\]=0 must be an int >= 1"),
        ({"model_type": "smollm3", "num_hidden_layers": 6, "no_rope_layer_interval": "4"},
         r"config\['no_rope_layer_interval'\]='4' must be an int >= 1"),
        ({**LLAMA4, "rope_scaling": {"rope_type": "su", "factor": 2.0}},
         r"config\['rope_scaling'\]\['rope_type'\]='su' is not one of"),
        ({**LLAMA4, "rope_theta": 0.5}, r"config\['rope_parameters'\]\['rope_theta'\]=0.5 must"),
        ({"model_type": "gemma3_text", "num_hidden_layers": 6,
          "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}},
         r"config\['rope_parameters'\]=.*Gemma 3 nests them by layer type"),
        ({"model_type": "gemma3", "text_config": {"model_type": "cohere", "num_hidden_layers": 2}},
         r"config\['text_config'\]\['model_type'\]='cohere' has no layer schedule"),
    ],
)
def test_bad_configs(config, message) -> None:
    with pytest.raises(ParameterError, match=message):
        posenc.layer_schedule(config)
    with pytest.raises(ParameterError, match=message):
        posenc.layer_rope_parameters(config)


@pytest.mark.parametrize("layer", [4, 40, -1, True, 1.0])
def test_layer_beyond_the_depth(layer) -> None:
    with pytest.raises(ParameterError, match=rf"layer={layer!r} is beyond the model's depth: "
                                             r"num_hidden_layers=4 \(layers 0..3\)"):
        posenc.layer_rope_parameters(LLAMA4, layer)


@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_narrow_dtypes_are_unsupported(library) -> None:
    xp = pytest.importorskip(library)
    with pytest.raises(Unsupported, match="dtype=float16: layer_schedule needs float32"):
        posenc.layer_schedule(LLAMA4, dtype=xp.float16)
    assert posenc.layer_schedule(LLAMA4, dtype=xp.float64).dtype == xp.float64


def test_parameters_per_layer() -> None:
    """Llama 4: flag 1 = rope (a dict for rope()), flag 0 = None; one layer by index."""
    layers = posenc.layer_rope_parameters(LLAMA4)
    assert [p is not None for p in layers] == [True, True, False, True]
    assert layers[0] == {"rope_type": "default", "rope_theta": 500000.0}
    assert posenc.layer_rope_parameters(LLAMA4, 2) is None
    gemma = {"model_type": "gemma3_text", "num_hidden_layers": 6,
             "rope_scaling": {"rope_type": "linear", "factor": 8.0}}
    layers = posenc.layer_rope_parameters(gemma)
    assert layers[0] == {"rope_type": "default", "rope_theta": 10000.0}
    assert layers[5] == {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}


# --------------------------------------------------------------------------------------------
# oracle: transformers' config classes and modeling code
# --------------------------------------------------------------------------------------------

_CLASSES = {  # model_type: (module, config class, attention class, rotary class)
    "gemma3_text": ("gemma3", "Gemma3TextConfig", "Gemma3Attention", "Gemma3RotaryEmbedding"),
    "gemma4_text": ("gemma4", "Gemma4TextConfig", "Gemma4TextAttention",
                    "Gemma4TextRotaryEmbedding"),
    "cohere2": ("cohere2", "Cohere2Config", "Cohere2Attention", "Cohere2RotaryEmbedding"),
    "smollm3": ("smollm3", "SmolLM3Config", "SmolLM3Attention", "SmolLM3RotaryEmbedding"),
    "llama4_text": ("llama4", "Llama4TextConfig", "Llama4TextAttention",
                    "Llama4TextRotaryEmbedding"),
}
_TINY = {"hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 16,
         "intermediate_size": 32, "vocab_size": 64}


def _transformers_layers(config: dict):
    """Per layer (has_rope, local, rope dict or None, inv_freq or None), as transformers builds
    them from ``config``."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    if "text_config" in config:
        config = {"model_type": f"{config['model_type']}_text", **config["text_config"]}
    module, config_cls, attention_cls, rotary_cls = _CLASSES[config["model_type"]]
    configuration = importlib.import_module(f"transformers.models.{module}.configuration_{module}")
    modeling = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
    kwargs = {k: v for k, v in config.items() if k not in ("model_type", "head_dim")}
    if module == "llama4":
        kwargs["intermediate_size_mlp"] = 32
    if module == "gemma4":  # full layers have their own head_dim (512 by default)
        kwargs["global_head_dim"] = _TINY["head_dim"]
    cfg = getattr(configuration, config_cls)(**{**kwargs, **_TINY})
    rotary = getattr(modeling, rotary_cls)(cfg)
    rows = []
    for i in range(cfg.num_hidden_layers):
        attention = getattr(modeling, attention_cls)(cfg, i)
        layer_type = cfg.layer_types[i]
        if module in ("gemma3", "gemma4"):  # their attention always applies the rotation
            has_rope, rope = True, cfg.rope_parameters[layer_type]
            inv_freq = getattr(rotary, f"{layer_type}_inv_freq")
        else:
            has_rope = (attention.sliding_window is not None if module == "cohere2"
                        else bool(attention.use_rope))
            rope, inv_freq = cfg.rope_parameters, rotary.inv_freq
        rows.append((has_rope, layer_type != "full_attention", rope if has_rope else None,
                     inv_freq.numpy() if has_rope else None))
    return rows


_ALPHA_CASES = ("smollm3_ntk_alpha", "llama4_dynamic_alpha")  # Hunyuan's rope: not these models'
# families whose NoPE layers are decided in the model's forward (position embeddings withheld,
# a condition inside attention): their oracle is a forward pass per layer, in
# tests/peers/test_family_sweep.py::test_nope_schedules_conform_layer_by_layer
_FORWARD_ORACLE = ("afmoe", "flint", "lara_mini", "exaone4", "exaone_moe", "kolibri1",
                   "cohere2_moe", "muse_glimmer_text", "muse_spark_text", "mistral_large4_text")


@pytest.mark.parametrize("case_name", [
    c.name for c in specs()["layer_schedule"].cases if c.name not in _ALPHA_CASES
    and c.params["config"].get("model_type") not in _FORWARD_ORACLE])
def test_oracle_transformers(case_name: str) -> None:
    spec = specs()["layer_schedule"]
    case = golden.load(spec).cases[case_name]
    config = case.params["config"]
    before = copy.deepcopy(config)
    ours = posenc.layer_rope_parameters(config)
    assert config == before, "layer_rope_parameters changed its argument"
    # transformers' config classes standardise rope dicts in place: give them a copy, or the
    # cached spec's case (and every later reader of it) changes
    rows = _transformers_layers(copy.deepcopy(config))
    assert case.output.shape == (len(rows), 5)
    for i, (has_rope, local, rope, inv_freq) in enumerate(rows):
        row = case.output[i]
        assert row[0] == has_rope and row[1] == local, (i, row)
        assert (ours[i] is None) == (not has_rope), i
        if not has_rope:
            np.testing.assert_array_equal(row[2:], 0.0)
            continue
        assert row[2] == SCHEDULES.index(rope["rope_type"]), (i, rope)
        assert row[3] == rope["rope_theta"] and row[4] == (rope.get("factor") or 1.0), (i, rope)
        assert ours[i]["rope_type"] == rope["rope_type"]
        assert ours[i]["rope_theta"] == rope["rope_theta"]
        # Llama 4 Scout's llama3 dict has low_freq_factor = high_freq_factor (an empty band)
        ours_freq, _ = posenc.rope_frequencies(16, scaling=ours[i])
        np.testing.assert_allclose(ours_freq, inv_freq, rtol=1e-6, err_msg=f"layer {i}")


@pytest.mark.parametrize("case_name", _ALPHA_CASES)
def test_ntk_alpha_layers_vs_transformers_hunyuan(case_name: str) -> None:
    """A layer config spelling ntk_alpha (or Hunyuan's dynamic + alpha): schedule index 8 on the
    rope layers, and their dict gives the inverse frequencies of transformers' Hunyuan rotary
    module built from the same rope dict."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import HunYuanDenseV1Config
    from transformers.models.hunyuan_v1_dense.modeling_hunyuan_v1_dense import (
        HunYuanDenseV1RotaryEmbedding as Rotary,
    )

    case = golden.load(specs()["layer_schedule"]).cases[case_name]
    config = case.params["config"]
    ours = posenc.layer_rope_parameters(config)
    assert [p is not None for p in ours] == [True, True, True, False]  # interval 4: layer 3 NoPE
    np.testing.assert_array_equal(case.output[:3, 2], 8.0)
    assert SCHEDULES[8] == "ntk_alpha"
    np.testing.assert_array_equal(case.output[:3, 3], config["rope_theta"])
    np.testing.assert_array_equal(case.output[:3, 4], 1.0)
    np.testing.assert_array_equal(case.output[3], [0.0, 0.0, 0.0, 0.0, 0.0])
    hunyuan = HunYuanDenseV1Config(hidden_size=32, num_attention_heads=2, head_dim=16,
                                   num_hidden_layers=1, max_position_embeddings=4096,
                                   rope_parameters=copy.deepcopy(ours[0]))
    rotary = Rotary(hunyuan)
    assert rotary.rope_type == "ntk_alpha"
    ours_freq, _ = posenc.rope_frequencies(16, scaling=ours[0], dtype=np.float64)
    np.testing.assert_allclose(ours_freq, rotary.inv_freq.to(torch.float64).numpy(), rtol=1e-6)
