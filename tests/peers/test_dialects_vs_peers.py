"""Translated named configurations against the peers that define them: transformers' rotary
modules and ROPE_INIT_FUNCTIONS, and ONNX's reference RotaryEmbedding op (each skips when the
peer is not installed)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from posenc.dialects import rope_layers, translate
from posenc.dialects.named import NAMED
from posenc.reference.rope import rope as rope_reference


def test_gemma3_layer_types_vs_transformers_rotary_module() -> None:
    torch = pytest.importorskip("torch")
    gemma3 = pytest.importorskip("transformers.models.gemma3.modeling_gemma3")
    from transformers import Gemma3TextConfig

    named = NAMED["gemma-3-4b"]
    config = Gemma3TextConfig(head_dim=256, num_attention_heads=8, num_key_value_heads=4,
                              hidden_size=2560, max_position_embeddings=131072, num_hidden_layers=6,
                              layer_types=named["layer_types"],
                              rope_parameters=copy.deepcopy(named["rope_parameters"]))
    module = gemma3.Gemma3RotaryEmbedding(config)
    layers = rope_layers(named)
    assert set(layers) == {"sliding_attention", "full_attention"}
    for layer_type, layer in layers.items():
        theirs = getattr(module, f"{layer_type}_inv_freq").to(torch.float64).numpy()
        np.testing.assert_allclose(theirs, layer.resolve().inv_freq, rtol=2.4e-7,
                                   err_msg=layer_type)
        assert getattr(module, f"{layer_type}_attention_scaling") == pytest.approx(
            layer.resolve().attention_factor)


@pytest.mark.parametrize("model", ["llama-3.1-8b", "deepseek-v3", "phi-3.5-mini", "phi-4-mini",
                                   "ministral-8b", "gpt-oss-20b"])
def test_named_configs_vs_rope_init_functions(model: str) -> None:
    pytest.importorskip("torch")
    utils = pytest.importorskip("transformers.modeling_rope_utils")
    from transformers import PretrainedConfig

    layer = rope_layers(NAMED[model])["all"]
    config = PretrainedConfig(head_dim=layer.head_dim, hidden_size=layer.head_dim,
                              num_attention_heads=1,
                              max_position_embeddings=layer.max_position_embeddings,
                              rope_parameters=dict(layer.scaling))
    name = layer.rope_type
    if name == "default":
        pytest.skip("default frequencies: covered by the rope oracles")
    inv_freq, attention = utils.ROPE_INIT_FUNCTIONS[name](config, None)
    np.testing.assert_allclose(inv_freq.double().numpy(), layer.resolve().inv_freq, rtol=5e-7)
    assert attention == pytest.approx(layer.resolve().attention_factor, rel=1e-6)


def _onnx_rotary(x, cos, sin, positions, *, interleaved, rotary_dim):
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    node = helper.make_node("RotaryEmbedding", ["X", "cos_cache", "sin_cache", "position_ids"],
                            ["Y"], interleaved=interleaved, rotary_embedding_dim=rotary_dim)
    inputs = [helper.make_tensor_value_info(n, TensorProto.DOUBLE, None)
              for n in ("X", "cos_cache", "sin_cache")]
    inputs.append(helper.make_tensor_value_info("position_ids", TensorProto.INT64, None))
    graph = helper.make_graph([node], "rope", inputs,
                              [helper.make_tensor_value_info("Y", TensorProto.DOUBLE, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    return ReferenceEvaluator(model).run(None, {"X": x, "cos_cache": cos, "sin_cache": sin,
                                               "position_ids": positions})[0]


@pytest.mark.parametrize(("model", "layer_type", "seq_len"), [
    ("llama-3.1-8b", "all", None), ("gemma-3-4b", "full_attention", None),
    ("deepseek-v3", "all", None), ("phi-3.5-mini", "all", 5000), ("phi-4-mini", "all", 5000),
    ("ministral-8b", "all", None), ("gemma-4-31b", "full_attention", None),
    ("ministral-3-8b", "all", None)])
def test_onnx_translation_vs_onnx_reference_op(model, layer_type, seq_len) -> None:
    onnx = pytest.importorskip("onnx")
    if "RotaryEmbedding" not in {s.name for s in onnx.defs.get_all_schemas()}:
        pytest.skip("onnx has no RotaryEmbedding (opset 23)")
    layer = rope_layers(NAMED[model])[layer_type]
    positions = np.array([[0, 5, 63, 40]])
    out = translate(NAMED[model], "onnx", max_positions=64, seq_len=seq_len)[layer_type]
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 2, 4, layer.head_dim))  # [batch, heads, seq, head_dim]
    y = _onnx_rotary(x, out["cos_cache"], out["sin_cache"], positions,
                     interleaved=out["interleaved"], rotary_dim=out["rotary_embedding_dim"])
    expected = rope_reference(x, positions, base=10000.0,
                              layout="interleaved" if layer.interleaved else "half",
                              rotary_dim=None, scaling=layer.scaling, seq_len=seq_len)
    np.testing.assert_allclose(y, expected, atol=1e-12)


def test_deepseek_v3_vs_transformers_rotary_module() -> None:
    """transformers' DeepseekV3RotaryEmbedding (YaRN factor 40 with mscale = mscale_all_dim:
    attention factor 1) against the layer posenc reads from the published config."""
    torch = pytest.importorskip("torch")
    deepseek = pytest.importorskip("transformers.models.deepseek_v3.modeling_deepseek_v3")
    from transformers import DeepseekV3Config

    named = copy.deepcopy(NAMED["deepseek-v3"])
    config = DeepseekV3Config(hidden_size=named["hidden_size"],
                              num_attention_heads=named["num_attention_heads"],
                              qk_rope_head_dim=64, qk_nope_head_dim=128,
                              max_position_embeddings=named["max_position_embeddings"],
                              rope_parameters={**named["rope_scaling"], "rope_type": "yarn",
                                               "rope_theta": named["rope_theta"]})
    module = deepseek.DeepseekV3RotaryEmbedding(config)
    layer = rope_layers(NAMED["deepseek-v3"])["all"]
    np.testing.assert_allclose(module.inv_freq.double().numpy(), layer.resolve().inv_freq,
                               rtol=5e-7)
    assert module.attention_scaling == pytest.approx(layer.resolve().attention_factor)
    assert layer.resolve().attention_factor == pytest.approx(1.0)
    position_ids = torch.tensor([[0, 4096, 163839]])
    cos, _ = module(torch.zeros(1, 3, 64), position_ids)
    assert cos.shape[-1] == 64


def test_gemma4_vs_transformers_rotary_module() -> None:
    """transformers' Gemma4TextRotaryEmbedding built from the published Gemma 4 31B text
    config: the sliding layers' 256-wide default rope and the full layers' proportional rope
    over global_head_dim 512 (64 of 256 pairs rotate) equal the layers posenc reads."""
    pytest.importorskip("torch")
    gemma4 = pytest.importorskip("transformers.models.gemma4.modeling_gemma4")
    from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig

    named = copy.deepcopy(NAMED["gemma-4-31b"])
    config = Gemma4TextConfig(num_hidden_layers=len(named["layer_types"]), **{
        k: named[k] for k in ("head_dim", "global_head_dim", "hidden_size", "num_attention_heads",
                              "num_key_value_heads", "num_global_key_value_heads",
                              "max_position_embeddings", "layer_types", "rope_parameters")})
    module = gemma4.Gemma4TextRotaryEmbedding(config)
    layers = rope_layers(NAMED["gemma-4-31b"])
    assert sorted(layers) == ["full_attention", "sliding_attention"]
    for layer_type, layer in layers.items():
        theirs = getattr(module, f"{layer_type}_inv_freq").double().numpy()
        ours = np.array(layer.resolve().inv_freq)
        assert theirs.shape == ours.shape, layer_type
        np.testing.assert_allclose(theirs, ours, rtol=5e-7, err_msg=layer_type)
    full = np.array(layers["full_attention"].resolve().inv_freq)
    assert full.shape == (256,) and np.all(full[:64] > 0) and np.all(full[64:] == 0)


def test_ministral3_vs_transformers_rotary_module() -> None:
    """transformers' Ministral3RotaryEmbedding (YaRN 16, attention factor 1) from the published
    config equals posenc's layer; llama_4_scaling_beta leaves the rope and goes into a note."""
    pytest.importorskip("torch")
    ministral3 = pytest.importorskip("transformers.models.ministral3.modeling_ministral3")
    from transformers import Ministral3Config

    named = copy.deepcopy(NAMED["ministral-3-8b"])
    config = Ministral3Config(**named)
    module = ministral3.Ministral3RotaryEmbedding(config)
    layer = rope_layers(NAMED["ministral-3-8b"])["all"]
    np.testing.assert_allclose(module.inv_freq.double().numpy(), layer.resolve().inv_freq,
                               rtol=5e-7)
    assert module.attention_scaling == pytest.approx(layer.resolve().attention_factor)
    assert "llama_4_scaling_beta" not in layer.scaling
    assert any("llama_4_scaling_beta=0.1" in note for note in layer.notes)
