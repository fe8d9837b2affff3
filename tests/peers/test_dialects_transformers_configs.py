"""posenc.dialects.rope_layers on the config classes of the installed transformers (no
weights): the MLA families' pairing and rotary width, Gemma 4's per-layer head widths, and
hybrid layer types without rope. Where a family has its own apply function, posenc.rope with
the parameters read rotates like it, on float64 inputs with float64 cos/sin computed here."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import posenc
from posenc.dialects import rope_layers
from posenc.errors import ParameterError

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # noqa: E402


def _config(model_type: str, **kwargs) -> dict:
    return CONFIG_MAPPING[model_type](**kwargs).to_dict()


def _modeling(model_type: str):
    return importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")


def _angles(theta: float, dim: int, positions: np.ndarray) -> np.ndarray:
    """[seq, dim/2] float64 m·θ_i for the default rope."""
    inv = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    return positions[:, None].astype(np.float64) * inv[None, :]


def _half_cos_sin(angles: np.ndarray) -> tuple:
    emb = np.concatenate([angles, angles], -1)[None]  # [1, seq, dim]: cat(freqs, freqs)
    return torch.from_numpy(np.cos(emb)), torch.from_numpy(np.sin(emb))


def _apply(model_type: str, how: str, q, angles: np.ndarray):
    """The family's own apply function on q [1, heads, seq, dim] (k alike)."""
    mod = _modeling(model_type)
    if how == "complex":  # DeepSeek-V2: view_as_complex times polar(1, m·θ)
        freqs_cis = torch.polar(torch.ones(angles.shape, dtype=torch.float64),
                                torch.from_numpy(angles))[None]
        return mod.apply_rotary_emb(q, q, freqs_cis)[0]
    cos, sin = _half_cos_sin(angles)
    fn = mod.apply_rotary_pos_emb_interleave if how == "interleave" else mod.apply_rotary_pos_emb
    return fn(q, q, cos, sin)[0]


# (model_type, the function its attention rotates the rope slice with, pairing posenc reads)
MLA_FAMILIES = [
    ("minicpm3", "rotate_half", False),
    ("hy_v4", "rotate_half", False),
    ("hy_v4_vl", "rotate_half", True),  # its rotate_half is interleaved
    ("deepseek_v2", "complex", True),
    ("deepseek_v3", "interleave", True),
    ("deepseek_v32", "interleave", True),  # main attention; only the indexer rotates halves
    ("axk1", "interleave", True),
    ("axk2", "interleave", True),  # main attention; only the indexer rotates halves
    ("glm4_moe_lite", "interleave", True),
    ("glm_moe_dsa", "interleave", True),
    ("longcat_flash", "interleave", True),
    ("youtu", "interleave", True),
    ("mistral4", "interleave", True),
]


@pytest.mark.parametrize(("model_type", "how", "interleaved"), MLA_FAMILIES)
def test_mla_pairing_is_the_familys(model_type: str, how: str, interleaved: bool) -> None:
    config = _config(model_type)
    (layer,) = rope_layers(config).values()
    assert layer.interleaved is interleaved
    assert layer.head_dim == (config.get("text_config") or config)["qk_rope_head_dim"]
    if layer.rope_type != "default":
        return  # Mistral 4's yarn: its frequencies are checked below
    rng = np.random.default_rng(0)
    positions = np.arange(9) * 37
    # float32 values: DeepSeek-V2's .float() keeps them exactly, the rest runs in float64
    x = rng.standard_normal((1, 3, positions.size, layer.head_dim)).astype(np.float32)
    x = x.astype(np.float64)
    angles = _angles(layer.scaling["rope_theta"], layer.head_dim, positions)
    actual = _apply(model_type, how, torch.from_numpy(x), angles).numpy()
    layout = "interleaved" if layer.interleaved else "half"
    # text tokens: HY-V4-VL's M-RoPE rows are equal, its rotation the text rope's
    scaling = {k: v for k, v in layer.scaling.items() if k != "mrope_section"}
    expected = np.asarray(posenc.rope(x, positions, layout=layout, scaling=scaling))
    if how == "interleave":  # output in de-interleaved order: the evens' results, then the odds'
        expected = np.concatenate([expected[..., 0::2], expected[..., 1::2]], -1)
    np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("model_type", ["deepseek_v3", "glm4_moe_lite", "mistral4", "youtu",
                                        "axk1", "sarvam_mla"])
def test_rope_interleave_false_reads_half(model_type: str) -> None:
    assert rope_layers(_config(model_type))["all"].interleaved is True
    (layer,) = rope_layers(_config(model_type, rope_interleave=False)).values()
    assert layer.interleaved is False
    # the modeling code's other branch: apply_rotary_pos_emb, the half rotation
    if model_type != "sarvam_mla":  # a config-only family (DeepSeek-V3's modeling)
        source = _modeling(model_type).__file__
        text = open(source).read()
        assert "if self.config.rope_interleave:" in text


def test_mistral4_rotates_qk_rope_head_dim_once() -> None:
    config = _config("mistral4")
    assert config["head_dim"] == 128 and config["qk_rope_head_dim"] == 64
    assert config["rope_parameters"]["partial_rotary_factor"] == 0.5
    (layer,) = rope_layers(config).values()
    assert layer.head_dim == 64 and "partial_rotary_factor" not in layer.scaling
    # the family's rotary module: head_dim * partial_rotary_factor = 64 features, 32 frequencies
    cfg = CONFIG_MAPPING["mistral4"]()
    module = _modeling("mistral4").Mistral4RotaryEmbedding(cfg)
    inv_freq = module.inv_freq.double().numpy()
    ours, factor = posenc.rope_frequencies(layer.head_dim, scaling=layer.scaling)
    assert inv_freq.shape == np.shape(ours) == (32,)
    np.testing.assert_allclose(inv_freq, ours, rtol=2e-6)
    assert factor == pytest.approx(module.attention_scaling, rel=1e-6)
    # and the rotation its attention applies, with the module's cos/sin, is posenc's
    positions = np.arange(6) * 101
    x = np.random.default_rng(1).standard_normal((1, 2, positions.size, 64))
    cos, sin = module(torch.zeros(1, dtype=torch.float64), torch.from_numpy(positions)[None])
    actual = _modeling("mistral4").apply_rotary_pos_emb_interleave(
        torch.from_numpy(x), torch.from_numpy(x), cos.double(), sin.double())[0].numpy()
    expected = np.asarray(posenc.rope(x, positions, layout="interleaved",
                                      scaling=layer.scaling))
    expected = np.concatenate([expected[..., 0::2], expected[..., 1::2]], -1)
    np.testing.assert_allclose(actual, expected, rtol=0, atol=5e-5)


def test_an_mla_factor_naming_another_width_is_refused() -> None:
    config = _config("mistral4")
    config["rope_parameters"] = {**config["rope_parameters"], "partial_rotary_factor": 0.25}
    with pytest.raises(ParameterError, match="qk_rope_head_dim is 64"):
        rope_layers(config)


def test_gemma4_full_attention_head_dim_from_per_layer_config() -> None:
    config = _config("gemma4")["text_config"]
    assert config.get("global_head_dim") is None
    assert {int(i): v["head_dim"] for i, v in config["per_layer_config"].items()} == {
        i: 512 for i, t in enumerate(config["layer_types"]) if t == "full_attention"}
    layers = rope_layers(config)
    assert layers["full_attention"].head_dim == 512
    assert layers["sliding_attention"].head_dim == config["head_dim"] == 256
    # the family's rotary module for full attention: 512 * 0.25 / 2 = 64 proportional
    # frequencies of width 512 (the rest zero)
    cfg = CONFIG_MAPPING["gemma4"]().text_config
    module = _modeling("gemma4").Gemma4TextRotaryEmbedding(cfg)
    theirs = module.full_attention_inv_freq.double().numpy()
    ours, _ = posenc.rope_frequencies(512, scaling=layers["full_attention"].scaling)
    assert theirs.shape == np.shape(ours) == (256,)
    np.testing.assert_allclose(theirs, ours, rtol=2e-6, atol=0)
    assert rope_layers(_config("gemma4"))["full_attention"].head_dim == 512


def test_per_layer_head_dims_that_differ_within_a_type_are_refused() -> None:
    config = _config("gemma4")["text_config"]
    config["per_layer_config"] = {**config["per_layer_config"], "5": {"head_dim": 384}}
    config["per_layer_config"].pop("05", None)
    with pytest.raises(ParameterError, match="different head_dims"):
        rope_layers(config)


@pytest.mark.parametrize(("model_type", "skipped"), [("lfm3", "conv"), ("dory", "mlp")])
def test_layers_without_attention_have_no_rope(model_type: str, skipped: str) -> None:
    config = _config(model_type)
    assert skipped in config["layer_types"]
    layers = rope_layers(config)
    assert set(layers) == {"full_attention", "sliding_attention"}
    for t, layer in layers.items():
        assert layer.scaling["rope_theta"] == config["rope_parameters"][t]["rope_theta"]


def test_an_attention_layer_type_without_a_rope_entry_is_still_an_error() -> None:
    config = _config("lfm3")
    config["layer_types"] = [*config["layer_types"], "chunked_attention"]
    with pytest.raises(ParameterError, match="no 'chunked_attention' entry"):
        rope_layers(config)
    config["layer_types"] = [*config["layer_types"][:-1], "indexed_attention"]
    with pytest.raises(ParameterError, match="no 'indexed_attention' entry"):
        rope_layers(config)
