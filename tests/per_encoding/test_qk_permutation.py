"""q/k weight permutation: bad inputs name the value, and every golden against the peers'
own expressions (transformers' Meta -> HF permute, llama.cpp's HF -> GGUF permute,
transformers' DeepSeek-V3 apply_rotary_pos_emb_interleave)."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

with contextlib.suppress(ImportError):
    import torch  # noqa: F401  (before TensorFlow, which has crashed when imported first)

from posenc import golden, permute_qk
from posenc.catalog import specs
from posenc.errors import ParameterError
from posenc.specs import resolve_params

W = np.arange(48, dtype=np.float64).reshape(24, 2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_heads": 5}, r"n_heads=5 does not divide the feature axis \(24 rows\)"),
        ({"n_heads": 3, "rotary_dim": 5}, r"rotary_dim=5 is odd"),
        ({"n_heads": 3, "rotary_dim": 10}, r"rotary_dim=10 exceeds head_dim=8"),
        ({"n_heads": 0}, r"n_heads=0 must be >= 1"),
        ({"n_heads": 3, "to": "neox"}, r"to='neox' is not one of 'half', 'interleaved'"),
        ({"n_heads": 3, "rope_slice": "middle"}, r"rope_slice='middle' is not one of"),
        ({"n_heads": 3, "axis": 2}, r"axis=2 is out of range for w with 2 dims"),
    ],
)
def test_bad_inputs_name_the_value(kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        permute_qk(W, **kwargs)


def _golden_cases():
    spec = specs()["qk_permutation"]
    stored = golden.load(spec)
    for name, case in stored.cases.items():
        yield name, case, resolve_params(spec, case.params)


def _peer_to_half(w: np.ndarray, n_heads: int) -> np.ndarray:
    """transformers convert_llama_weights_to_hf.permute, on the feature axis 0:
    w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)."""
    rest = w.shape[1:]
    grid = w.reshape(n_heads, w.shape[0] // n_heads // 2, 2, *rest)
    return np.swapaxes(grid, 1, 2).reshape(w.shape)


def _peer_to_interleaved(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf LlamaModel.permute: weights.reshape(n_head, 2,
    rows // n_head // 2, *rest).swapaxes(1, 2).reshape(weights.shape)."""
    grid = w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:])
    return np.swapaxes(grid, 1, 2).reshape(w.shape)


def test_full_head_goldens_match_the_converters() -> None:
    checked = 0
    for name, case, params in _golden_cases():
        if params["rotary_dim"] is not None:
            continue
        w = np.moveaxis(case.inputs["w"], params["axis"], 0)
        peer = _peer_to_half if params["to"] == "half" else _peer_to_interleaved
        expected = np.moveaxis(peer(w, params["n_heads"]), 0, params["axis"])
        np.testing.assert_array_equal(case.output, expected, err_msg=name)
        checked += 1
    assert checked >= 5


def test_partial_goldens_permute_only_the_rotary_slice() -> None:
    """Partial rotary / DeepSeek: the converters' permute applied to each head's rotary rows."""
    checked = 0
    for name, case, params in _golden_cases():
        r = params["rotary_dim"]
        if r is None:
            continue
        w, n = case.inputs["w"], params["n_heads"]
        heads = w.reshape(n, w.shape[0] // n, *w.shape[1:])
        start = 0 if params["rope_slice"] == "first" else heads.shape[1] - r
        expected = heads.copy()
        for h in range(n):
            expected[h, start:start + r] = _peer_to_half(heads[h, start:start + r], 1)
        np.testing.assert_array_equal(case.output, expected.reshape(w.shape), err_msg=name)
        checked += 1
    assert checked == 2


def test_deepseek_golden_vs_transformers_interleave() -> None:
    """transformers' DeepSeek-V3 rope at cos = 1, sin = 0 is the bare de-interleave."""
    torch = pytest.importorskip("torch")
    deepseek = pytest.importorskip("transformers.models.deepseek_v3.modeling_deepseek_v3")
    (case,) = [c for n, c, _ in _golden_cases()
                       if n == "activations_deepseek_deinterleave"]
    x = torch.tensor(case.inputs["w"])[None, None]  # [batch, heads, seq, r]
    cos, sin = torch.ones(1, x.shape[2], x.shape[3]), torch.zeros(1, x.shape[2], x.shape[3])
    q, _ = deepseek.apply_rotary_pos_emb_interleave(x, x, cos, sin)
    np.testing.assert_array_equal(case.output, q[0, 0].numpy())


def test_deepseek_rope_is_interleaved_rope_then_permutation() -> None:
    """At real angles: transformers' DeepSeek-V3 output = to='half' of an interleaved rope."""
    torch = pytest.importorskip("torch")
    deepseek = pytest.importorskip("transformers.models.deepseek_v3.modeling_deepseek_v3")
    from posenc import rope

    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 2, 6, 16))
    positions = np.arange(6) * 37
    theta = 10000.0 ** (-np.arange(8) / 8)
    angle = positions[:, None] * theta
    emb = np.concatenate([angle, angle], axis=-1)[None]  # transformers' cat(freqs, freqs)
    q, _ = deepseek.apply_rotary_pos_emb_interleave(
        torch.tensor(x), torch.tensor(x), torch.tensor(np.cos(emb)), torch.tensor(np.sin(emb)))
    ours = permute_qk(rope(x, positions, layout="interleaved"), n_heads=1, axis=-1)
    np.testing.assert_allclose(ours, q.numpy(), rtol=0, atol=1e-12)
