"""The engines run for real: ggml (ggml-python), MLX (mx.fast.rope) and ONNX Runtime.

Each test skips, saying which package brings it, when its engine is not installed: CI does
not build the engines; ``nox -s ggml`` (``mlx``, ``onnxruntime``) makes the environment and
runs these. posenc's transcription ``ggml_rope`` is checked against the engine, the engines
against independent float64 computations, and each named configuration's translation
(``posenc.dialects``) run in the engine against transformers' own rotary module.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest

with contextlib.suppress(ImportError):
    import torch  # noqa: F401  (before anything that may pull in TensorFlow)

from posenc import ggml_rope, golden
from posenc.catalog import specs
from posenc.dialects import rope_layers, translate
from posenc.dialects.named import NAMED
from posenc.errors import ParameterError
from posenc.reference import ggml_rope as ggml_reference_module
from posenc.specs import resolve_params

from .test_dialects import NAMED_CASES as NAMED_GGML  # model, layer, options, seq_len

EPS32 = 2.0**-24  # half an ulp of 1 in float32
RNG = np.random.default_rng(30)


GROUP_OF = {"ggml": "ggml", "mlx": "mlx", "onnxruntime": "onnxruntime"}


def _engine(module: str, package: str) -> None:
    pytest.importorskip(module, reason=f"the engine is not installed here: pip install "
                        f"{package}, or nox -s {GROUP_OF[module]} (peers/envs/"
                        f"{GROUP_OF[module]}.txt)")


def test_every_engine_peer_has_a_nox_group() -> None:
    from pathlib import Path

    from posenc.backends.peers import ENGINES

    envs = Path(__file__).parents[2] / "peers" / "envs"
    named = " ".join(line for path in envs.glob("*.txt")
                     for line in path.read_text(encoding="utf-8").splitlines()
                     if line.startswith("# peers:"))
    assert all(name in named.split() for name in ENGINES), named


def _float64_rope(x: np.ndarray, positions: np.ndarray, inv_freq: np.ndarray,
                  layout: str) -> np.ndarray:
    """Independent float64 rotation of x [..., seq, dim] by positions[seq] * inv_freq."""
    angles = np.asarray(positions, np.float64)[:, None] * np.asarray(inv_freq, np.float64)
    c, s = np.cos(angles), np.sin(angles)
    r = 2 * len(inv_freq)
    x = np.asarray(x, np.float64)
    out = x.copy()
    if layout == "half":
        a, b = x[..., : r // 2], x[..., r // 2: r]
        out[..., : r // 2], out[..., r // 2: r] = a * c - b * s, a * s + b * c
    else:
        a, b = x[..., 0:r:2], x[..., 1:r:2]
        out[..., 0:r:2], out[..., 1:r:2] = a * c - b * s, a * s + b * c
    return out


# -- ggml: the transcription against the engine -----------------------------------------------
GGML_CASES = {  # name: (dim, positions rows, params)
    "normal": (64, 1, {"mode": "normal"}),
    "neox_partial": (64, 1, {"mode": "neox", "n_dims": 32}),
    "neox_freq_factors": (64, 1, {"mode": "neox", "freq_factors": [
        1.0 + (i % 5) * 0.75 for i in range(32)]}),
    "mrope": (64, 4, {"mode": "mrope", "sections": [6, 5, 5, 0]}),
    "imrope": (64, 4, {"mode": "imrope", "sections": [6, 5, 5, 0]}),
    "vision": (64, 4, {"mode": "vision", "sections": [8, 8, 0, 0]}),
    "yarn_neox": (128, 1, {"mode": "neox", "freq_base": 1e6, "freq_scale": 1 / 16,
                           "ext_factor": 1.0, "n_ctx_orig": 4096, "attn_factor": 0.9}),
    "yarn_normal": (128, 1, {"mode": "normal", "freq_scale": 1 / 40, "ext_factor": 1.0,
                             "n_ctx_orig": 4096}),
}
POSITIONS = np.array([0, 1, 2, 17, 4095, 4096, 65535, 2**20 - 1, 2**20, 2**20 + 3])


def _ggml_inputs(name: str) -> tuple[np.ndarray, np.ndarray, dict]:
    dim, rows, params = GGML_CASES[name]
    x = RNG.standard_normal((2, len(POSITIONS), dim)).astype(np.float32)
    pos = POSITIONS if rows == 1 else np.stack([POSITIONS, POSITIONS // 3, POSITIONS // 7,
                                                POSITIONS % 5])
    return x, pos, params


@pytest.mark.parametrize("name", sorted(GGML_CASES))
def test_ggml_transcription_matches_the_engine(name: str) -> None:
    """posenc.ggml_rope (float64 x: ggml-cpu's float32 angles emulated exactly) equals the
    engine within the last float32 roundings: cos/sin from the C library (an ulp from
    NumPy's in about 8 % of entries) and ggml's float32 rotation, 8 float32 ulps of |x|."""
    _engine("ggml", "ggml-python")
    from posenc.backends.peers.ggml import ggml_rope as engine

    x, pos, params = _ggml_inputs(name)
    got = engine(x, pos, **params).astype(np.float64)
    model = ggml_rope(x.astype(np.float64), pos, **params)
    scale = float(np.abs(x).max()) * max(1.0, params.get("attn_factor", 1.0) * 1.3)
    err = np.abs(got - model).max()
    assert err <= 16 * EPS32 * scale, f"{name}: {err:.3g}"


def test_ggml_yarn_blend_is_one_fused_multiply_add() -> None:
    """ggml's YaRN blend rounds once (an FMA): with two roundings instead, the transcription
    is 2.6e-5 away here (up to 1.2e-3 at other bases and scales); with one, within float32 ulps."""
    _engine("ggml", "ggml-python")
    from posenc.backends.peers.ggml import ggml_rope as engine

    x, pos, params = _ggml_inputs("yarn_neox")
    got = engine(x, pos, **params).astype(np.float64)
    fused = ggml_reference_module.ggml_rope(x, pos, **{**_defaults(), **params})
    with pytest.MonkeyPatch.context() as patch:  # fmaf(a, b, c) -> fl32(fl32(a*b) + c)
        patch.setattr(ggml_reference_module, "_fma32", lambda a, b, c: a * b + c)
        twice = ggml_reference_module.ggml_rope(x, pos, **{**_defaults(), **params})
    assert np.abs(got - fused).max() <= 16 * EPS32 * float(np.abs(x).max())
    assert np.abs(got - twice).max() > 1e-5  # 2.6e-5 measured on ggml-python 0.0.45


def _defaults() -> dict:
    return {k: v for k, v in specs()["ggml_rope"].defaults().items()}


def test_ggml_float16_matches_the_transcription() -> None:
    """float16 x: ggml rotates in float32 and stores float16, as the transcription does."""
    _engine("ggml", "ggml-python")
    from posenc.backends.peers.ggml import ggml_rope as engine

    x, pos, params = _ggml_inputs("neox_freq_factors")
    x16 = x.astype(np.float16)
    got = engine(x16, pos, **params)
    assert got.dtype == np.float16
    model = ggml_rope(x16.astype(np.float64), pos, **params)
    assert np.abs(got.astype(np.float64) - model).max() <= 2**-10 * float(np.abs(x).max())


def test_ggml_against_float64_truth() -> None:
    """The engine against an independent float64 rope: the float32 angle ladder's error grows
    with the position (recorded in docs/known-issues.md), and is tiny where positions are."""
    _engine("ggml", "ggml-python")
    from posenc.backends.peers.ggml import ggml_rope as engine

    dim = 128
    x = RNG.standard_normal((1, len(POSITIONS), dim)).astype(np.float32)
    got = engine(x, POSITIONS, mode="neox", freq_base=10000.0).astype(np.float64)
    truth = _float64_rope(x, POSITIONS, 10000.0 ** (-np.arange(dim // 2) * 2 / dim), "half")
    err = np.abs(got - truth).max(axis=(0, 2))
    small = POSITIONS < 64
    assert err[small].max() < 1e-5
    bound = POSITIONS * (dim // 2 + 6) * 2 * EPS32 * float(np.abs(x).max()) * 2 + 1e-5
    assert np.all(err <= bound), err


def test_ggml_abort_is_a_scope_error_not_a_crash() -> None:
    """What ggml asserts (and so aborts the process on) is refused before the call."""
    _engine("ggml", "ggml-python")
    from posenc.backends.peers.ggml import ggml_rope as engine
    from posenc.errors import Unsupported

    x = np.zeros((3, 8), np.float32)
    with pytest.raises(Unsupported, match="n_dims"):
        engine(x, np.arange(3), n_dims=3)


# -- dialects end to end: the translation run in the engine against transformers ----------------


def _transformers_rope(model: str, layer_type: str, x: np.ndarray, positions: np.ndarray,
                       seq_len: int | None) -> tuple[np.ndarray, object]:
    """transformers' own rotary module (LlamaRotaryEmbedding or GPT-NeoX's for partial rotary,
    through peer:transformers) on float32 x. An interleaved checkpoint (DeepSeek) goes as
    transformers' DeepSeek-V3 attention takes it: features (2i, 2i+1) moved to (i, i + r/2),
    rotated in the half layout, and moved back."""
    pytest.importorskip("transformers", reason="pip install transformers")
    import torch

    from posenc.backends.peers.transformers import rope as transformers_rope

    layer = rope_layers(NAMED[model])[layer_type]
    if layer.mrope_section:  # Qwen2.5-VL's own rotary: t, h, w ids, sections recomposed
        return _transformers_mrope(layer, x, positions), layer.resolve(seq_len)
    if layer.interleaved:
        r = layer.resolve(seq_len).rotary_dim
        order = np.concatenate([np.arange(0, r, 2), np.arange(1, r, 2),
                                np.arange(r, x.shape[-1])])
        out, resolved = _transformers_half(layer, x[..., order], positions, seq_len,
                                           transformers_rope, torch)
        return out[..., np.argsort(order)], resolved
    return _transformers_half(layer, x, positions, seq_len, transformers_rope, torch)


def _transformers_mrope(layer, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
    import torch
    import transformers
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as qwen

    config = transformers.Qwen2_5_VLTextConfig(
        hidden_size=layer.head_dim, num_attention_heads=1, rope_parameters={
            "rope_type": "default", "rope_theta": float(layer.scaling["rope_theta"]),
            "mrope_section": list(layer.mrope_section)})
    rotary = qwen.Qwen2_5_VLRotaryEmbedding(config)
    x4 = torch.from_numpy(np.ascontiguousarray(x)).reshape(-1, 1, *x.shape[-2:])
    ids = torch.from_numpy(np.asarray(positions[:3], np.int64))[:, None, :]  # [3, 1, seq]
    with torch.no_grad():
        cos, sin = rotary(x4, ids.expand(3, x4.shape[0], -1))
        out, _ = qwen.apply_rotary_pos_emb(x4, x4, cos, sin)
    return out.reshape(x.shape).numpy().astype(np.float64)


def _transformers_half(layer, x, positions, seq_len, transformers_rope, torch):
    scaling = dict(layer.scaling)
    # transformers picks LongRoPE's factors by max(position_ids) + 1 itself
    out = transformers_rope(torch.from_numpy(np.ascontiguousarray(x)),
                            torch.from_numpy(positions.astype(np.int64)), scaling=scaling)
    return out.numpy().astype(np.float64), layer.resolve(seq_len)


def _translation_bound(x: np.ndarray, positions: np.ndarray, resolved) -> np.ndarray:
    """Per token: ggml's float32 ladder (about 2i + 6 roundings in the angle of pair i) plus
    transformers' float32 m·θ (2 roundings), on |x| times the attention factor, plus 8 ulps
    of cos/sin."""
    positions = np.asarray(positions, np.float64)  # [seq], or [4, seq] (the largest id)
    top = np.abs(positions).reshape(-1, positions.shape[-1]).max(axis=0)
    weight = max((2 * i + 8) * t for i, t in enumerate(resolved.inv_freq))
    return float(np.abs(x).max()) * 2 * max(resolved.attention_factor, 1.0) * (
        top * weight * EPS32 + 8 * EPS32)


def _per_token(diff: np.ndarray) -> np.ndarray:
    return np.abs(diff).reshape(-1, diff.shape[-2], diff.shape[-1]).max(axis=(0, 2))


@pytest.mark.parametrize("name", sorted(NAMED_GGML))
def test_named_translation_runs_in_ggml_like_transformers(name: str) -> None:
    _engine("ggml", "ggml-python")
    from posenc.backends.peers.ggml import ggml_rope as engine

    model, layer_type, options, seq_len = NAMED_GGML[name]
    spec = specs()["ggml_rope"]
    case = golden.load(spec).cases[name]
    params = resolve_params(spec, case.params)
    assert params == {**params, **translate(NAMED[model], "ggml", **options)[layer_type]}
    x = np.asarray(case.inputs["x"], np.float32)
    positions = np.asarray(case.inputs["positions"])
    if name == "phi3_5_mini_short":  # llama.cpp picks the factors by n_ctx (4096: short),
        keep = positions < 4096      # transformers by max(position) + 1: both short below
        x, positions = x[..., keep, :], positions[keep]
    expected, resolved = _transformers_rope(model, layer_type, x, positions, seq_len)
    got = engine(x, positions, **params).astype(np.float64)
    err, bound = _per_token(got - expected), _translation_bound(x, positions, resolved)
    assert np.all(err <= bound), f"{name}: per token {err} > {bound}"
    # where the bound is tight the check tells a schedule from another: a rotated token
    moved = _per_token(got - x) > 100 * bound
    assert np.any(moved & (positions.reshape(-1, positions.shape[-1]).max(axis=0) > 0)), name


ONNX_POSITIONS = np.array([0, 1, 2, 100, 1000, 4095, 4096, 8191])


@pytest.mark.parametrize("model", sorted(NAMED))
def test_named_translation_runs_in_onnxruntime_like_transformers(model: str) -> None:
    """translate(config, "onnx"): the caches (float64, stored in float32) and attributes run
    in ONNX Runtime's opset-23 RotaryEmbedding, against transformers' module per layer."""
    _engine("onnxruntime", "onnxruntime")
    from posenc.backends.peers.onnxruntime import run_operator

    layers = rope_layers(NAMED[model])
    # LongRoPE: transformers takes the long factors past original_max_position_embeddings
    # (4096), as max(ONNX_POSITIONS) + 1 = 8192 is; the caches are baked for that length
    long = int(ONNX_POSITIONS.max()) + 1 if model in ("phi-3.5-mini", "phi-4-mini") else None
    for layer_type, layer in layers.items():
        if layer.mrope_section:
            with pytest.raises(ParameterError, match="M-RoPE"):
                translate(NAMED[model], "onnx", max_positions=8192)
            continue
        params = translate(NAMED[model], "onnx", max_positions=8192, seq_len=long)[layer_type]
        x = RNG.standard_normal((2, len(ONNX_POSITIONS), layer.head_dim)).astype(np.float32)
        got = run_operator("", x, ONNX_POSITIONS, params["cos_cache"].astype(np.float32),
                           params["sin_cache"].astype(np.float32),
                           interleaved=bool(params["interleaved"]),
                           rotary_dim=params["rotary_embedding_dim"]).astype(np.float64)
        expected, resolved = _transformers_rope(model, layer_type, x, ONNX_POSITIONS, long)
        # transformers' float32 m·θ against float64 caches stored in float32
        top = ONNX_POSITIONS * float(max(resolved.inv_freq))
        bound = float(np.abs(x).max()) * 2 * max(resolved.attention_factor, 1.0) * (
            4 * top * EPS32 + 8 * EPS32)
        assert np.all(_per_token(got - expected) <= bound), (model, layer_type)
        assert np.any(_per_token(got - x) > 100 * bound), (model, layer_type)


# -- MLX and ONNX Runtime against float64 ------------------------------------------------------
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("freqs", [False, True])
def test_mlx_fast_rope_against_float64(layout: str, freqs: bool) -> None:
    """mx.fast.rope, contiguous (offset) and scattered (one token per example) positions: its
    float32 angle error (MLX's exp2 of the frequencies, or freqs given) stays within the
    conventional float32 allowance of 4·eps·|mθ| plus the float32 rotation's ulps."""
    _engine("mlx", "mlx[cpu]")
    from posenc.backends.peers.mlx import rope_of

    dim = 64
    inv = 10000.0 ** (-np.arange(dim // 2) * 2 / dim)
    for pos in (np.arange(4090, 4100), POSITIONS[:8]):
        x = RNG.standard_normal((2, len(pos), dim)).astype(np.float32)
        got = rope_of(x, pos, base=10000.0, layout=layout, rotary_dim=None, scaling=None,
                      freqs=freqs).astype(np.float64)
        truth = _float64_rope(x, pos, inv, layout)
        bound = float(np.abs(x).max()) * 2 * (6 * EPS32 * float(pos.max()) + 8 * EPS32)
        assert np.abs(got - truth).max() <= bound


@pytest.mark.parametrize("domain", ["", "com.microsoft"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_onnxruntime_operators_against_float64(domain: str, layout: str) -> None:
    """Both operators with float64-built caches stored in float32: the rotation itself, so
    within a few float32 ulps of the float64 rope at every position."""
    _engine("onnxruntime", "onnxruntime")
    from posenc.backends.peers.onnxruntime import rope_of

    dim, rotary = 64, 48
    inv = 10000.0 ** (-np.arange(rotary // 2) * 2 / rotary)
    x = RNG.standard_normal((2, 3, len(POSITIONS), dim)).astype(np.float32)
    got = rope_of(domain, x, POSITIONS, 10000.0, layout, rotary, None).astype(np.float64)
    truth = _float64_rope(x, POSITIONS, inv, layout)
    assert np.abs(got - truth).max() <= 8 * EPS32 * float(np.abs(x).max())


def test_fma_emulation_agrees_with_exact_fmaf_on_ggml_blends() -> None:
    """The array-API emulation of fmaf (exact float32 product in float64, two roundings of the
    sum) equals the exact, once-rounded one of the reference on YaRN blends ggml makes
    (pure NumPy: runs everywhere)."""
    f32 = np.float32
    a = (RNG.uniform(0, 2**20, 4000) * RNG.choice([1 / 16, 1 / 40], 4000)).astype(f32)
    b = (1 - RNG.integers(1, 128, 4000) / 128).astype(f32)
    c = (RNG.uniform(0, 2**20, 4000) * (1 - b)).astype(f32)
    emulated = (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(f32)
    exact = np.array([ggml_reference_module._fma32(p, q, r) for p, q, r in zip(a, b, c,
                                                                               strict=True)])
    assert np.array_equal(emulated, exact)
    # the hazard exists for other inputs: a float64 sum exactly on a float32 midpoint
    p, q, r = f32(2**-24 * (1 + 2**-23)), f32(1 - 2**-23), f32(1 + 2**-23)
    assert ggml_reference_module._fma32(p, q, r) == r  # below the midpoint: stays
    assert f32(float(p) * float(q) + float(r)) != r   # double rounding: ties to even, up
    assert math.isclose(float(p) * float(q), 2**-24 * (1 - 2**-46), rel_tol=0)


@pytest.mark.parametrize("domain", ["", "com.microsoft"])
def test_onnxruntime_refuses_caches_shorter_than_the_sequence(domain: str) -> None:
    """An ONNX Runtime bug (docs/known-issues.md): with position_ids the caches need
    max(position_ids) + 1 rows (the operator's definition), but ORT 1.32 refuses any cache with
    fewer rows than the sequence. The model is well defined: the ONNX reference evaluator runs
    it and equals an independent float64 rotation; ORT raises instead of computing it."""
    _engine("onnxruntime", "onnxruntime")
    from onnxruntime.capi.onnxruntime_pybind11_state import RuntimeException

    from posenc.backends.peers.onnxruntime import run_operator

    x = RNG.standard_normal((1, 2, 4, 8)).astype(np.float32)
    ids = np.array([0, 1, 1, 0])
    angles = np.array([0.0, 1.0])[:, None] * 10000.0 ** (-np.arange(4) / 4)
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    truth = _float64_rope(x, ids, 10000.0 ** (-np.arange(4) / 4), "half")
    if domain == "":
        pytest.importorskip("onnx.reference")
        from posenc.backends.peers.onnx_reference import rope as onnx_reference_rope

        reference = onnx_reference_rope(x, ids, layout="half")
        assert np.abs(reference - truth).max() < 1e-6
    with pytest.raises(RuntimeException, match="Updating cos_cache and sin_cache"):
        run_operator(domain, x, ids, cos, sin, interleaved=False, rotary_dim=8)
    padded = [np.concatenate([c, np.zeros((2, 4), np.float32)]) for c in (cos, sin)]
    got = run_operator(domain, x, ids, *padded, interleaved=False, rotary_dim=8)
    assert np.abs(got - truth).max() < 1e-6
