"""Dialect translation: transformers configs -> vLLM / ggml / ONNX and back.

What is checked against what: the ggml goldens (posenc.reference.ggml_rope, ggml-cpu's
arithmetic) against posenc's transformers-semantics reference rope of the source config; the
ONNX translation through onnx's own ReferenceEvaluator; the layer-keyed configs through
transformers' ROPE_INIT_FUNCTIONS and Gemma 3's rotary module; vLLM's divergences through a
reference of vLLM's semantics. Where ecosystems genuinely part, a test shows exactly where."""

from __future__ import annotations

import contextlib
import copy
import math

import numpy as np
import pytest

with contextlib.suppress(ImportError):
    import torch  # noqa: F401  (before TensorFlow, which has crashed when imported first)

from posenc import golden, permute_qk
from posenc.catalog import specs
from posenc.dialects import from_ggml, from_vllm, rope_layers, to_ggml, translate
from posenc.dialects.named import NAMED
from posenc.errors import ParameterError
from posenc.reference.ggml_rope import ggml_rope as ggml_reference
from posenc.reference.mrope import mrope as mrope_reference
from posenc.reference.rope import rope as rope_reference
from posenc.reference.vllm_rope_frequencies import vllm_frequencies
from posenc.rotary.schedules import frequencies
from posenc.specs import resolve_params

EPS32 = 2.0**-24
# ggml case -> (named model, layer type, translate options, seq_len transformers sees)
NAMED_CASES = {
    "llama3_1_8b": ("llama-3.1-8b", "all", {}, None),
    "gemma3_sliding": ("gemma-3-4b", "sliding_attention", {}, None),
    "gemma3_full": ("gemma-3-4b", "full_attention", {}, None),
    "deepseek_v3": ("deepseek-v3", "all", {}, None),
    "phi3_5_mini_short": ("phi-3.5-mini", "all", {"n_ctx": 4096}, 4096),
    "phi3_5_mini_long": ("phi-3.5-mini", "all", {"n_ctx": 131072}, 131072),
    "phi4_mini_partial_long": ("phi-4-mini", "all", {"n_ctx": 131072}, 131072),
    "qwen2_5_vl_mrope": ("qwen2.5-vl-7b", "all", {}, None),
    "ministral_8b": ("ministral-8b", "all", {}, None),
    "gemma4_sliding": ("gemma-4-31b", "sliding_attention", {}, None),
    "gemma4_full_proportional": ("gemma-4-31b", "full_attention", {}, None),
    "ministral3_8b_yarn": ("ministral-3-8b", "all", {}, None),
}


def _ggml_case(name: str):
    spec = specs()["ggml_rope"]
    case = golden.load(spec).cases[name]
    return case, resolve_params(spec, case.params)


def _ladder_bound(x: np.ndarray, positions: np.ndarray, inv_freq, attention: float
                  ) -> np.ndarray:
    """ggml's float32 angle ladder, per token: about (2i + 6) float32 roundings in the angle
    of pair i, plus two float32 ulps of cos/sin; ``[seq]`` bounds on |ggml - exact|."""
    top = np.abs(np.asarray(positions)).reshape(-1, np.shape(x)[-2]).max(axis=0)
    weights = np.array([(2 * i + 6) * t for i, t in enumerate(inv_freq)]).max()
    slack = top * weights * EPS32 + 4 * EPS32
    return float(np.abs(x).max()) * 2 * max(attention, 1.0) * slack


def _per_token(diff: np.ndarray) -> np.ndarray:
    return np.abs(diff).reshape(-1, diff.shape[-2], diff.shape[-1]).max(axis=(0, 2))


def _transformers_side(model: str, layer_type: str, x, positions, seq_len):
    layer = rope_layers(NAMED[model])[layer_type]
    layout = "interleaved" if layer.interleaved else "half"
    if layer.mrope_section:
        out = mrope_reference(x, positions[:3], sections=list(layer.mrope_section),
                              interleaved=False, base=float(layer.scaling["rope_theta"]),
                              layout=layout, scaling=None, ordering=None)
    else:
        out = rope_reference(x, positions, base=10000.0, layout=layout, rotary_dim=None,
                             scaling=layer.scaling, seq_len=seq_len)
    resolved = layer.resolve(seq_len)
    return out, resolved


@pytest.mark.parametrize("name", sorted(NAMED_CASES))
def test_named_ggml_goldens_equal_the_transformers_rope(name: str) -> None:
    """The golden of each translated named configuration (ggml-cpu semantics) rotates like
    transformers' rope of the source config, within the float32 ladder's error."""
    model, layer_type, _, seq_len = NAMED_CASES[name]
    case, _ = _ggml_case(name)
    x, positions = case.inputs["x"], case.inputs["positions"]
    expected, resolved = _transformers_side(model, layer_type, x, positions, seq_len)
    bound = _ladder_bound(x, positions, resolved.inv_freq, resolved.attention_factor)
    err = _per_token(case.output - expected)
    assert np.all(err <= bound), f"{name}: per token {err} > {bound}"
    tight = bound < 1e-4  # the tokens where the check can tell a schedule from another
    assert tight.any() and np.all(_per_token(case.output - x)[tight][1:] > 100 * bound[tight][1:])


@pytest.mark.parametrize("name", sorted(NAMED_CASES))
def test_named_ggml_cases_are_the_translation(name: str) -> None:
    model, layer_type, options, _ = NAMED_CASES[name]
    _, params = _ggml_case(name)
    translated = translate(NAMED[model], "ggml", **options)[layer_type]
    for key, value in translated.items():
        if isinstance(value, float):
            assert params[key] == pytest.approx(value, rel=1e-15), key
        else:
            assert params[key] == value, key


def test_llama3_rope_freqs_match_llama_cpp_rule() -> None:
    """rope_freqs as llama.cpp's convert_hf_to_gguf writes it for llama3: 1 above
    L0/high_freq_factor, factor below L0/low_freq_factor, 1/((1 - s)/factor + s) between."""
    params = translate(NAMED["llama-3.1-8b"], "ggml")["all"]
    factor, low, high, trained = 8.0, 1.0, 4.0, 8192
    expected = []
    for i in range(64):
        wavelength = 2 * math.pi * 500000.0 ** (2 * i / 128)
        if wavelength < trained / high:
            expected.append(1.0)
        elif wavelength > trained / low:
            expected.append(factor)
        else:
            smooth = (trained / wavelength - low) / (high - low)
            expected.append(1 / ((1 - smooth) / factor + smooth))
    np.testing.assert_allclose(params["freq_factors"], expected, rtol=1e-12)


# --------------------------------------------------------------------------------------------
# where ecosystems part
# --------------------------------------------------------------------------------------------


def test_llama_cpp_longrope_parts_from_transformers_below_the_original_length() -> None:
    """llama.cpp picks LongRoPE's factors once, by the allocated context: with n_ctx 131072 a
    4000-token sequence is rotated with the long factors; transformers uses the short ones up
    to 4096 tokens. The outputs part at every position > 0."""
    case, params = _ggml_case("phi3_5_mini_long")
    x, positions = case.inputs["x"][:, :2], case.inputs["positions"][:2]  # positions 0, 4095
    hf_short, _ = _transformers_side("phi-3.5-mini", "all", x, positions, 4096)
    ggml = ggml_reference(x, positions, **params)
    np.testing.assert_allclose(ggml[:, 0], hf_short[:, 0], atol=1e-6)  # position 0
    assert np.abs(ggml[:, 1] - hf_short[:, 1]).max() > 0.1  # position 4095


def test_gpt_oss_truncate_false_has_no_ggml_form_and_would_part() -> None:
    with pytest.raises(ParameterError, match=r"truncate=False .* ggml cannot express"):
        translate(NAMED["gpt-oss-20b"], "ggml")
    truncated = copy.deepcopy(NAMED["gpt-oss-20b"])
    truncated["rope_scaling"]["truncate"] = True
    a, _ = frequencies(64, 150000.0, rope_layers(NAMED["gpt-oss-20b"])["all"].scaling, None)
    b, _ = frequencies(64, 150000.0, rope_layers(truncated)["all"].scaling, None)
    assert max(abs(p / q - 1) for p, q in zip(a, b, strict=True)) > 1e-3


def test_vllm_agrees_where_it_should() -> None:
    for model in ("llama-3.1-8b", "deepseek-v3", "ministral-8b", "gpt-oss-20b"):
        layer = rope_layers(NAMED[model])["all"]
        kwargs = translate(NAMED[model], "vllm")["all"]
        got, attention = vllm_frequencies(kwargs, max_model_len=4096)
        resolved = layer.resolve()
        np.testing.assert_allclose(got, resolved.inv_freq, rtol=1e-12, err_msg=model)
        assert attention == pytest.approx(resolved.attention_factor, rel=1e-12), model


def test_vllm_dynamic_is_computed_at_max_position() -> None:
    """vLLM 0.32's dynamic NTK: base * (s P / T - (s - 1))^(r/(r-2)) at P = max_position
    against T = max_trained_positions, for every length. Translated (T = P = 2048) it is the
    default ladder, as transformers below 2048; with T = 2048 and P = 8192 it is transformers'
    dynamic at 8192 tokens, also for a 100-token request."""
    config = {"head_dim": 64, "max_position_embeddings": 2048, "rope_theta": 10000.0,
              "rope_scaling": {"rope_type": "dynamic", "factor": 4.0}}
    layer = rope_layers(config)["all"]
    kwargs = translate(config, "vllm")["all"]
    assert kwargs["max_position"] == 2048
    vllm, _ = vllm_frequencies(kwargs, max_model_len=8192)
    np.testing.assert_allclose(vllm, layer.resolve(1000).inv_freq, rtol=1e-12)
    np.testing.assert_allclose(vllm, 10000.0 ** (-np.arange(32) / 32), rtol=1e-12)
    trained = {**kwargs, "max_position": 8192,
               "rope_parameters": {**kwargs["rope_parameters"], "max_trained_positions": 2048}}
    fixed, _ = vllm_frequencies(trained, max_model_len=8192)
    np.testing.assert_allclose(fixed, layer.resolve(8192).inv_freq, rtol=1e-12)
    by_hand = 10000.0 * 13.0 ** (64 / 62)  # 4 * 8192 / 2048 - 3 = 13
    np.testing.assert_allclose(fixed, by_hand ** (-np.arange(32) / 32), rtol=1e-12)


def test_vllm_longrope_switches_by_max_model_len() -> None:
    kwargs = translate(NAMED["phi-3.5-mini"], "vllm")["all"]
    layer = rope_layers(NAMED["phi-3.5-mini"])["all"]
    vllm, _ = vllm_frequencies(kwargs, max_model_len=131072)
    np.testing.assert_allclose(vllm, layer.resolve(4097).inv_freq, rtol=1e-12)
    assert max(abs(p / q - 1) for p, q in
               zip(vllm, layer.resolve(100).inv_freq, strict=True)) > 0.5


def test_vllm_explicit_yarn_attention_factor_reaches_vllm() -> None:
    """vLLM 0.32's get_rope passes attention_factor to its YaRN class (and never reads the
    attn_factor older translations wrote): the translation keeps it under its own key."""
    config = {"head_dim": 32, "max_position_embeddings": 16384, "rope_theta": 10000.0,
              "rope_scaling": {"rope_type": "yarn", "factor": 8.0, "attention_factor": 1.25,
                               "original_max_position_embeddings": 2048}}
    kwargs = translate(config, "vllm")["all"]
    assert kwargs["rope_parameters"]["attention_factor"] == 1.25
    assert "attn_factor" not in kwargs["rope_parameters"]
    _, attention = vllm_frequencies(kwargs, max_model_len=16384)
    assert attention == 1.25
    assert from_vllm(kwargs)["attention_factor"] == 1.25
    stale = {**kwargs, "rope_parameters": {**kwargs["rope_parameters"], "attn_factor": 1.1}}
    with pytest.raises(ParameterError, match=r"'attn_factor', which vLLM 0\.32\.0's get_rope"):
        from_vllm(stale)


@pytest.mark.parametrize(("scaling", "expected"), [
    ({"factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0}, 1.0),  # DeepSeek-V3's dict
    ({"factor": 16.0, "mscale": 0.707, "mscale_all_dim": 1.0},
     (0.0707 * math.log(16) + 1) / (0.1 * math.log(16) + 1)),  # 0.936398
    ({"factor": 16.0, "mscale": 0.707}, 0.1 * math.log(16) + 1),  # one of the two: ignored
    ({"factor": 8.0, "attention_factor": 1.5}, 1.5),
])
def test_vllm_yarn_attention_factor_as_transformers(scaling, expected) -> None:
    """The generic YaRN of vLLM 0.32 takes the attention factor transformers takes, so a
    translated YaRN dict stays 'yarn' (no deepseek_yarn rename) and gives the same factor."""
    config = {"head_dim": 64, "max_position_embeddings": 163840, "rope_theta": 10000.0,
              "rope_scaling": {"rope_type": "yarn", "original_max_position_embeddings": 4096,
                               **scaling}}
    kwargs = translate(config, "vllm")["all"]
    assert kwargs["rope_parameters"]["rope_type"] == "yarn"
    _, attention = vllm_frequencies(kwargs, max_model_len=163840)
    assert attention == pytest.approx(expected, rel=1e-12)
    assert rope_layers(config)["all"].resolve().attention_factor == pytest.approx(expected,
                                                                                  rel=1e-12)


# --------------------------------------------------------------------------------------------
# round trips and bad input
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scaling", [
    {"rope_type": "default"},
    {"rope_type": "linear", "factor": 8.0},
    {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 4096,
     "beta_fast": 16.0, "beta_slow": 2.0, "attention_factor": 1.3},
    {"rope_type": "default", "mrope_section": [4, 6, 6]},
])
def test_ggml_round_trip(scaling) -> None:
    config = {"head_dim": 32, "rope_theta": 500000.0, "rope_parameters": dict(scaling)}
    back = from_ggml(translate(config, "ggml")["all"], head_dim=32)
    layer = rope_layers({"head_dim": 32, "rope_parameters": back})["all"]
    original = rope_layers(config)["all"].resolve()
    again = layer.resolve()
    np.testing.assert_allclose(again.inv_freq, original.inv_freq, rtol=1e-12)
    assert again.attention_factor == pytest.approx(original.attention_factor, rel=1e-12)


def test_vllm_round_trip_deepseek() -> None:
    kwargs = translate(NAMED["deepseek-v3"], "vllm")["all"]
    assert kwargs["rope_parameters"]["rope_type"] == "yarn"
    assert kwargs["is_neox_style"] is False
    back = from_vllm(kwargs)
    layer = rope_layers({"qk_rope_head_dim": 64, "rope_parameters": back})["all"]
    original = rope_layers(NAMED["deepseek-v3"])["all"].resolve()
    assert layer.resolve().inv_freq == original.inv_freq
    # vLLM's DeepSeek models build deepseek_yarn: back as yarn with that class's factor
    deepseek = {**kwargs, "rope_parameters": {**kwargs["rope_parameters"],
                                              "rope_type": "deepseek_yarn", "truncate": False}}
    back = from_vllm(deepseek)
    assert "truncate" not in back and back["attention_factor"] == 1.0
    assert rope_layers({"qk_rope_head_dim": 64, "rope_parameters": back})["all"].resolve() \
        .inv_freq == original.inv_freq


@pytest.mark.parametrize(("config", "target", "message"), [
    ({"head_dim": 8, "rope_theta": 1e4, "rope_scaling": {"rope_type": "wavy"}}, "ggml",
     r"rope_scaling: scaling\['rope_type'\]='wavy' is not one of"),
    ({"head_dim": 8, "rope_theta": 1e4,
      "rope_scaling": {"rope_type": "linear", "factor": 2.0, "beta_fast": 3}}, "vllm",
     r"key 'beta_fast', which rope_type='linear' does not use"),
    ({"head_dim": 8, "layer_types": ["sliding_attention", "full_attention"],
      "rope_parameters": {"sliding_attention": {"rope_theta": 1e4}}}, "ggml",
     r"no 'full_attention' entry, which layer_types uses"),
    ({"head_dim": 8, "rope_theta": 1e4, "rope_scaling": {"type": "mrope",
                                                           "mrope_section": [1, 1, 2]}},
     "onnx", r"ONNX RotaryEmbedding .* cannot hold M-RoPE sections"),
    ({"head_dim": 8, "rope_theta": 1e4, "max_position_embeddings": 64,
      "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "ggml",
     r"rope_type='dynamic' rescales the base by the current sequence length"),
    ({"head_dim": 8, "rope_theta": 1e4}, "gguf", r"to='gguf' is not one of"),
])
def test_bad_configs_name_the_key(config, target, message) -> None:
    options = {"max_positions": 8} if target == "onnx" else {}
    with pytest.raises(ParameterError, match=message):
        translate(config, target, **options)


def test_mrope_sections_do_not_fit_neox() -> None:
    layer = rope_layers(NAMED["qwen2.5-vl-7b"])["all"]
    with pytest.raises(ParameterError, match=r"ggml mode 'neox' .* cannot hold M-RoPE"):
        to_ggml(layer, mode="neox")


# --------------------------------------------------------------------------------------------
# oracles: transformers' own functions and the ONNX reference op
# --------------------------------------------------------------------------------------------


def test_deepseek_transformers_rope_is_the_ggml_rope_permuted() -> None:
    """DeepSeek-V3: ggml (and vLLM) rotate the interleaved checkpoint in place (NORMAL);
    transformers' apply_rotary_pos_emb_interleave returns the same numbers de-interleaved:
    permute_qk(to='half') of ggml's output, within the float32 ladder."""
    case, _ = _ggml_case("deepseek_v3")
    x, positions = case.inputs["x"], case.inputs["positions"]
    layer = rope_layers(NAMED["deepseek-v3"])["all"]
    resolved = layer.resolve()
    theta = np.outer(positions, resolved.inv_freq)
    cos, sin = np.cos(theta) * resolved.attention_factor, np.sin(theta) * resolved.attention_factor
    a, b = x[..., 0::2], x[..., 1::2]
    transformers_out = np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)
    bound = _ladder_bound(x, positions, resolved.inv_freq, resolved.attention_factor)
    assert np.all(_per_token(permute_qk(case.output, n_heads=1, axis=-1) - transformers_out)
                  <= bound)
    assert np.abs(case.output - transformers_out).max() > 0.1  # the layouts differ


# --------------------------------------------------------------------------------------------
# posenc translate
# --------------------------------------------------------------------------------------------


def test_cli_translate_prints_the_mapping_and_the_rope_freqs_summary(tmp_path) -> None:
    import json

    from ..conftest import run_cli

    path = tmp_path / "config.json"
    path.write_text(json.dumps(NAMED["llama-3.1-8b"]))
    proc = run_cli("translate", "--from", "transformers", "--to", "ggml", str(path))
    assert proc.returncode == 0, proc.stderr
    assert 'mode: "neox"' in proc.stdout
    assert "freq_base: 500000.0" in proc.stdout
    assert "rope_freqs: 64 float32 divisors of theta_i, min 1, max 8" in proc.stdout


def test_cli_translate_names_what_the_target_cannot_express(tmp_path) -> None:
    import json

    from ..conftest import run_cli

    path = tmp_path / "config.json"
    path.write_text(json.dumps(NAMED["qwen2.5-vl-7b"]))
    proc = run_cli("translate", "--to", "ggml", "--mode", "neox", str(path))
    assert proc.returncode == 2
    assert "mrope_section=[16, 24, 24]: ggml mode 'neox'" in proc.stderr
    proc = run_cli("translate", "--to", "ggml", "--named", "gpt-oss-20b")
    assert proc.returncode == 2 and "truncate=False" in proc.stderr
    proc = run_cli("translate", "--to", "vllm", "--named", "gpt-oss-20b")
    assert proc.returncode == 0 and "[all] transformers -> vllm 0.32.0" in proc.stdout
    assert '"truncate": false' in proc.stdout  # vLLM 0.32's generic YaRN reads it


def test_cli_translate_back_from_ggml(tmp_path) -> None:
    import json

    from ..conftest import run_cli

    proc = run_cli("translate", "--to", "ggml", "--named", "deepseek-v3", "--json")
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "ggml.json"
    path.write_text(proc.stdout)
    back = run_cli("translate", "--from", "ggml", "--to", "transformers", str(path))
    assert back.returncode == 0, back.stderr
    params = json.loads(back.stdout)["all"]
    assert params["rope_type"] == "yarn" and params["factor"] == pytest.approx(40.0)
    assert params["attention_factor"] == pytest.approx(1.0)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"mode": "neox", "sections": [1, 1, 2, 0]}, r"sections=\[1, 1, 2, 0\] needs mode"),
    ({"mode": "mrope"}, r"mode='mrope' needs sections: a list of 4 ints"),
    ({"mode": "vision", "sections": [2, 2, 0, 0], "n_dims": 4}, r"needs n_dims = dim / 2 = 8"),
    ({"n_dims": 5}, r"n_dims=5 is odd"),
    ({"n_dims": 18}, r"n_dims=18 exceeds the head width dim=16"),
    ({"ext_factor": 1.0}, r"ext_factor=1.0 \(YaRN\) needs n_ctx_orig >= 1"),
    ({"freq_factors": [1.0] * 3}, r"freq_factors must be a list of 8 numbers"),
    ({"freq_factors": [1.0] * 7 + [0.0]}, r"freq_factors\[7\]=0.0 must be a finite number > 0"),
    ({"mode": "rotary"}, r"mode='rotary' is not one of"),
])
def test_ggml_rope_bad_inputs_name_the_value(kwargs, message) -> None:
    from posenc import ggml_rope

    x = np.zeros((3, 16))
    positions = np.arange(3) if kwargs.get("mode") not in ("mrope", "vision") else \
        np.zeros((4, 3), dtype=np.int64)
    with pytest.raises(ParameterError, match=message):
        ggml_rope(x, positions, **kwargs)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"rope_parameters": {"rope_type": "su"}}, r"rope_type'\]='su' is not one of"),
    ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "low_freq_factor": 1.0}},
     r"key 'low_freq_factor', which rope_type='linear' does not use"),
    ({"rope_parameters": {"rope_type": "longrope", "short_factor": [1.0] * 4,
                          "long_factor": [1.0] * 4}},
     r"original_max_position_embeddings'\] must be an int"),
    ({"max_model_len": 0}, r"max_model_len=0 must be >= 1"),
])
def test_vllm_rope_frequencies_bad_inputs_name_the_key(kwargs, message) -> None:
    from posenc import vllm_rope_frequencies

    with pytest.raises(ParameterError, match=message):
        vllm_rope_frequencies(8, max_position=64, **kwargs)


def test_qwen3_vl_interleaved_mrope_is_ggml_imrope() -> None:
    """mrope_interleaved (Qwen3-VL) translates to ggml's IMROPE, and ggml-cpu's interleaved
    sector rule rotates like posenc's transformers-semantics M-RoPE reference."""
    config = {"head_dim": 32, "rope_theta": 5000000.0,
              "rope_parameters": {"rope_type": "default", "mrope_section": [6, 5, 5],
                                  "mrope_interleaved": True}}
    params = translate(config, "ggml")["all"]
    assert params["mode"] == "imrope" and params["sections"] == [6, 5, 5, 0]
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 32))
    ids = np.array([[0, 3, 7, 9], [0, 1, 1, 2], [0, 2, 0, 5]])
    got = ggml_reference(x, np.concatenate([ids, np.zeros((1, 4), dtype=np.int64)]), **params)
    expected = mrope_reference(x, ids, sections=[6, 5, 5], interleaved=True, base=5000000.0,
                               layout="half", scaling=None, ordering=None)
    theta = 5000000.0 ** (-2.0 * np.arange(16) / 32)
    bound = _ladder_bound(x, ids, theta, 1.0)
    assert np.all(_per_token(got - expected) <= bound)
    assert from_ggml(params) == {"rope_type": "default", "rope_theta": 5000000.0,
                                 "mrope_section": [6, 5, 5], "mrope_interleaved": True}


@pytest.mark.parametrize(("model_type", "rope", "ordering"), [
    ("ernie4_5_vl_moe", {"rope_type": "default", "mrope_section": [6, 6, 4]}, "ernie"),
    ("bailing_moe_v2", {"rope_type": "default", "mrope_section": [4, 6, 6]}, "bailing"),
    ("hunyuan_vl", {"rope_type": "default", "mrope_section": [4, 4, 4, 4]}, "xdrope"),
    (None, {"type": "xdrope", "alpha": 1000.0, "xdrope_section": [4, 4, 4, 4]}, "xdrope"),
])
def test_mrope_orderings_ggml_cannot_run_are_refused(model_type, rope, ordering) -> None:
    """ERNIE 4.5-VL, Bailing and XD-RoPE configs have no ggml or vLLM get_rope form: ggml's
    'mrope' mode on the same sections rotates by other position rows (ERNIE shown against
    posenc's reference), as vLLM's MRotaryEmbedding would, so the translations name the
    ordering instead of returning Qwen2-VL's."""
    config = {"head_dim": 32, "rope_theta": 10000.0, "max_position_embeddings": 4096,
              "rope_scaling": dict(rope), **({"model_type": model_type} if model_type else {})}
    assert rope_layers(config)["all"].mrope_ordering == ordering
    with pytest.raises(ParameterError, match=rf"M-RoPE ordering is '{ordering}': ggml's"):
        translate(config, "ggml")
    with pytest.raises(ParameterError, match=rf"M-RoPE ordering is '{ordering}': vLLM's"):
        translate(config, "vllm")
    if ordering == "ernie":
        x = np.random.default_rng(4).standard_normal((2, 4, 32))
        ids = np.array([[0, 3, 7, 9], [0, 1, 1, 2], [0, 2, 0, 5]])
        as_qwen = ggml_reference(x, np.concatenate([ids, np.zeros((1, 4), dtype=np.int64)]),
                                 n_dims=32, mode="mrope", freq_base=10000.0, freq_scale=1.0,
                                 ext_factor=0.0, attn_factor=1.0, beta_fast=32.0,
                                 beta_slow=1.0, n_ctx_orig=0, sections=[6, 6, 4, 0],
                                 freq_factors=None)
        ernie = mrope_reference(x, ids, sections=[6, 6, 4], ordering="ernie", interleaved=False,
                                base=10000.0, layout="half", scaling=None)
        assert np.abs(as_qwen - ernie).max() > 1e-2
    qwen = {**config, "model_type": "qwen2_vl", "rope_scaling": {"rope_type": "default",
                                                               "mrope_section": [4, 6, 6]}}
    assert translate(qwen, "ggml")["all"]["mode"] == "mrope"
    assert translate(qwen, "vllm")["all"]["rope_parameters"]["mrope_section"] == [4, 6, 6]


def test_original_max_position_embeddings_beside_rope_scaling() -> None:
    """Phi-3.5's config.json keeps original_max_position_embeddings at the top level (where
    Phi3Config reads it); inside rope_scaling it gives the same layer."""
    published = NAMED["phi-3.5-mini"]
    assert "original_max_position_embeddings" not in published["rope_scaling"]
    inside = copy.deepcopy(published)
    inside["rope_scaling"]["original_max_position_embeddings"] = \
        inside.pop("original_max_position_embeddings")
    a, b = rope_layers(published)["all"], rope_layers(inside)["all"]
    assert a.scaling["original_max_position_embeddings"] == 4096
    assert a.resolve(131072).inv_freq == b.resolve(131072).inv_freq
    assert a.resolve(4096).inv_freq == b.resolve(4096).inv_freq
