"""Falcon's ALiBi order: transformers' Falcon adds the bias to q kᵀ before the 1/sqrt(head_dim)
scaling; posenc's ``alibi_bias(..., head_dim=d)`` (the bias over sqrt(d), added after the
scaling) reproduces its attention, the BLOOM-order bias does not. Checked with transformers
5.24 (FalconAttention's eager branch, and the SDPA mask FalconModel builds)."""

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
from posenc.specs import resolve_params

HEADS, HEAD_DIM, SEQ = 4, 8, 7  # 4 heads: slopes 2^-2 .. 2^-8, exact in Falcon's bfloat16


def _falcon(attn: str) -> Any:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import FalconConfig, FalconModel

    torch.manual_seed(0)
    config = FalconConfig(vocab_size=64, hidden_size=HEADS * HEAD_DIM, num_attention_heads=HEADS,
                          num_hidden_layers=1, alibi=True, new_decoder_architecture=False,
                          multi_query=False, parallel_attn=True, bias=False,
                          attention_dropout=0.0, hidden_dropout=0.0, attn_implementation=attn)
    return FalconModel(config).double().eval()


def _ours(attention: Any, hidden: Any, bias: np.ndarray) -> np.ndarray:
    """posenc.attention on the layer's own q, k, v with ``bias`` after the scaling, a causal
    mask, then the layer's output projection."""
    import torch

    with torch.no_grad():
        q, k, v = attention._split_heads(attention.query_key_value(hidden))
    q, k, v = (t.transpose(1, 2).numpy() for t in (q, k, v))  # [batch, heads, seq, d]
    causal = np.tril(np.ones((SEQ, SEQ), dtype=bool))
    out = posenc.attention(q, k, v, bias=bias, mask=causal)
    merged = np.ascontiguousarray(out.transpose(0, 2, 1, 3).reshape(1, SEQ, HEADS * HEAD_DIM))
    with torch.no_grad():
        return attention.dense(torch.from_numpy(merged)).numpy()


def _bias(head_dim: int | None) -> np.ndarray:
    return posenc.alibi_bias(HEADS, SEQ, SEQ, form="key_only", head_dim=head_dim,
                             dtype=np.float64)


def _layer_call(attn: str) -> tuple[Any, dict[str, Any], np.ndarray]:
    """FalconModel's own call of its attention layer: (layer, its arguments, its output)."""
    import torch

    model = _falcon(attn)
    layer = model.h[0].self_attention
    seen: dict[str, Any] = {}

    def hook(module: Any, args: tuple, kwargs: dict, output: Any) -> None:
        seen.update(kwargs, hidden=args[0] if args else kwargs["hidden_states"], out=output[0])

    layer.register_forward_hook(hook, with_kwargs=True)
    with torch.no_grad():
        model(torch.arange(1, SEQ + 1)[None])
    return layer, seen, seen["out"].numpy()


@pytest.mark.oracle
def test_the_eager_formula_is_the_bias_over_sqrt_head_dim() -> None:
    """FalconAttention's eager branch, (q kᵀ + alibi) / sqrt(d) + causal mask, equals posenc's
    attention with alibi_bias(head_dim=d) after the scaling; BLOOM's order does not."""
    import torch
    from transformers.models.falcon.modeling_falcon import build_alibi_tensor

    layer = _falcon("eager").h[0].self_attention
    hidden = torch.randn(1, SEQ, HEADS * HEAD_DIM, dtype=torch.float64)
    alibi = build_alibi_tensor(torch.ones(1, SEQ, dtype=torch.long), HEADS, torch.float64)
    causal = torch.triu(torch.full((SEQ, SEQ), torch.finfo(torch.float64).min,
                                   dtype=torch.float64), 1)[None, None]
    with torch.no_grad():
        theirs = layer(hidden, alibi, causal)[0].numpy()
    np.testing.assert_allclose(_ours(layer, hidden, _bias(HEAD_DIM)), theirs, rtol=0, atol=1e-12)
    assert np.abs(_ours(layer, hidden, _bias(None)) - theirs).max() > 1e-3  # BLOOM order


@pytest.mark.oracle
def test_falcon_model_sdpa_path_is_the_bias_over_sqrt_head_dim() -> None:
    """FalconModel (SDPA) folds alibi / sqrt(d) into the attention mask: the layer's output as
    the model calls it equals posenc's head_dim form."""
    layer, seen, theirs = _layer_call("sdpa")
    np.testing.assert_allclose(_ours(layer, seen["hidden"], _bias(HEAD_DIM)), theirs, rtol=0,
                               atol=1e-12)
    assert np.abs(_ours(layer, seen["hidden"], _bias(None)) - theirs).max() > 1e-3


@pytest.mark.oracle
def test_falcon_model_eager_path_counts_the_bias_twice() -> None:
    """Divergence found (transformers 5.24): FalconModel folds alibi / sqrt(d) into the mask it
    passes to every layer, and the eager branch adds alibi to q kᵀ again, so eager attention
    sees 2 alibi / sqrt(d) where SDPA sees alibi / sqrt(d) (the spec's bias_counted_twice
    diagnosis). Should transformers fix it, the eager path equals the SDPA one."""
    layer, seen, theirs = _layer_call("eager")
    once = _ours(layer, seen["hidden"], _bias(HEAD_DIM))
    if np.abs(once - theirs).max() < 1e-12:
        return  # fixed upstream: eager and SDPA agree
    np.testing.assert_allclose(_ours(layer, seen["hidden"], 2 * _bias(HEAD_DIM)), theirs,
                               rtol=0, atol=1e-12)


@pytest.mark.oracle
def test_golden_falcon_rw_1b_vs_falcon_build_alibi_tensor() -> None:
    """The golden (32 heads of 64, Falcon-RW-1B) against Falcon's own build_alibi_tensor over
    sqrt(64): equal up to Falcon's bfloat16 rounding of slope * j (relative 2^-9); the BLOOM
    order is 8x off."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.models.falcon.modeling_falcon import build_alibi_tensor

    spec = specs()["alibi_bias"]
    case = golden.load(spec).cases["falcon_rw_1b_key_only"]
    p = resolve_params(spec, case.params)
    mask = torch.ones(1, p["k_len"], dtype=torch.long)
    theirs = build_alibi_tensor(mask, p["num_heads"], torch.float32).double().numpy()
    theirs = theirs.reshape(p["num_heads"], 1, p["k_len"]) / math.sqrt(p["head_dim"])
    np.testing.assert_allclose(case.output, theirs, rtol=2.0**-8, atol=0)
    assert np.abs(case.output * math.sqrt(p["head_dim"]) - theirs).max() > 1.0


@pytest.mark.parametrize(("head_dim", "message"), [
    (0, r"head_dim=0 must be >= 1"), (-64, r"head_dim=-64 must be >= 1"),
    (64.0, r"head_dim must be an int, got 64.0"), (True, r"head_dim must be an int, got True"),
])
def test_bad_head_dim(pe, head_dim, message) -> None:
    with pytest.raises(posenc.ParameterError, match=message):
        pe.alibi_bias(4, 3, 3, head_dim=head_dim)
