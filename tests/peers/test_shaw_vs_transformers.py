"""The shaw_scores / shaw_attention goldens against transformers' relative_key attention
(Wav2Vec2-BERT), and its layer's forward pass against shaw_attention."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

# torch before any TensorFlow import (transformers may pull TensorFlow in)
with contextlib.suppress(ImportError):
    import torch  # noqa: F401

from posenc.catalog import specs

from ..shaw_reference import golden_case, t2t_value_term


def _peer_module(K: int, d: int, scale: float, table_k: np.ndarray, heads: int = 1):
    """A real float64 Wav2Vec2BertSelfAttention (eager attention) with left = right = K, head
    size d and our table as its distance_embedding; its scaling set to the case's scale."""
    torch = pytest.importorskip("torch")
    config_mod = pytest.importorskip("transformers.models.wav2vec2_bert.configuration_wav2vec2_bert")
    modeling = pytest.importorskip("transformers.models.wav2vec2_bert.modeling_wav2vec2_bert")
    config = config_mod.Wav2Vec2BertConfig(
        hidden_size=d * heads, num_attention_heads=heads, position_embeddings_type="relative_key",
        left_max_position_embeddings=K, right_max_position_embeddings=K, attention_dropout=0.0)
    config._attn_implementation = "eager"
    module = modeling.Wav2Vec2BertSelfAttention(config).double().eval()
    with torch.no_grad():
        module.distance_embedding.weight.copy_(torch.from_numpy(table_k))
    module.scaling = scale
    return modeling, module


def _as_self_attention(q: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, int]:
    """The peer starts its queries at position 0 (self-attention only). posenc's queries sit
    at the end of the keys, so q is front-padded with zero rows up to k_len; the last q_len
    rows of the peer's result are then the ones to compare."""
    pad = k.shape[-2] - q.shape[-2]
    widths = [(0, 0)] * (q.ndim - 2) + [(pad, 0), (0, 0)]
    return np.pad(q, widths), pad


def _bhld(*arrays: np.ndarray) -> list[np.ndarray]:
    """Broadcast the leading dims and fold them into the peer's [batch, heads=1, len, dim]."""
    batch = np.broadcast_shapes(*(a.shape[:-2] for a in arrays))
    return [np.broadcast_to(a, (*batch, *a.shape[-2:])).reshape(-1, 1, *a.shape[-2:])
            for a in arrays]


@pytest.mark.oracle
@pytest.mark.parametrize("name", [c.name for c in specs()["shaw_scores"].cases])
def test_scores_golden_vs_transformers_relative_key(name) -> None:
    torch = pytest.importorskip("torch")
    case, K, scale = golden_case("shaw_scores", name)
    q, k, table_k = case.inputs["q"], case.inputs["k"], case.inputs["table_k"]
    modeling, module = _peer_module(K, q.shape[-1], scale, table_k)
    q_full, pad = _as_self_attention(q, k)
    qb, kb = (torch.from_numpy(np.array(a)) for a in _bhld(q_full, k))
    with torch.no_grad():
        _, bias = modeling._apply_relative_key_position_encoding(module, qb, kb)
        scores = (qb @ kb.transpose(-1, -2) * module.scaling + bias).numpy()
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    peer = scores.reshape(*batch, *scores.shape[-2:])[..., pad:, :]
    np.testing.assert_allclose(case.output, peer, rtol=1e-12, atol=1e-12)


@pytest.mark.oracle
@pytest.mark.parametrize("name", [c.name for c in specs()["shaw_attention"].cases])
def test_attention_golden_vs_transformers_relative_key(name) -> None:
    """transformers' eager attention with the relative_key position bias gives the weights and
    a v; it has no value term, so table_v's term is added from the peer's weights with the
    materialised tensor2tensor gather. Fully masked rows are NaN in the peer (an additive
    -inf mask), zeros in posenc."""
    torch = pytest.importorskip("torch")
    case, K, scale = golden_case("shaw_attention", name)
    q, k, v = case.inputs["q"], case.inputs["k"], case.inputs["v"]
    table_k, table_v, mask = case.inputs["table_k"], case.inputs["table_v"], case.inputs["mask"]
    modeling, module = _peer_module(K, q.shape[-1], scale, table_k)
    q_full, pad = _as_self_attention(q, k)
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    qb, kb, vb = (torch.from_numpy(np.array(a)) for a in _bhld(q_full, k, v))
    additive = None
    if mask is not None:
        full_mask = np.broadcast_to(mask, (*batch, q.shape[-2], k.shape[-2]))
        full_mask = np.concatenate(  # the padding queries may attend everything
            [np.ones((*batch, pad, k.shape[-2]), bool), full_mask], axis=-2)
        additive = torch.from_numpy(np.where(full_mask, 0.0, -np.inf).reshape(
            -1, 1, k.shape[-2], k.shape[-2]))
    with torch.no_grad():
        _, bias = modeling._apply_relative_key_position_encoding(module, qb, kb)
        out, weights = modeling.eager_attention_forward(
            module, qb, kb, vb, additive, scaling=module.scaling, position_bias=bias)
    out = out.transpose(1, 2).numpy()[..., pad:, :]  # back to [b, 1, q_len, d_v]
    weights = weights.numpy()[..., pad:, :]
    if table_v is not None:
        out = out + t2t_value_term(weights, table_v, K)
    peer = out.reshape(*batch, q.shape[-2], v.shape[-1])
    keep = np.ones(peer.shape[:-1], bool)
    if mask is not None:
        keep = np.broadcast_to(mask, (*batch, q.shape[-2], k.shape[-2])).any(axis=-1)
        assert np.all(case.output[~keep] == 0)
    np.testing.assert_allclose(case.output[keep], peer[keep], rtol=1e-12, atol=1e-12)


@pytest.mark.oracle
def test_transformers_relative_key_layer_forward() -> None:
    """The public path: Wav2Vec2BertSelfAttention.forward (eager attention, relative_key,
    2 heads) equals shaw_attention on its own projections followed by its linear_out."""
    torch = pytest.importorskip("torch")
    import posenc

    K, heads, d = 3, 2, 4
    rng = np.random.default_rng(11)
    table_k = rng.standard_normal((2 * K + 1, d))
    _, module = _peer_module(K, d, d**-0.5, table_k, heads=heads)
    with torch.no_grad():
        x = torch.from_numpy(rng.standard_normal((2, 9, heads * d)))
        peer, _ = module(x)

        def split(t):  # [b, s, h*d] -> [b, h, s, d]
            return t.view(2, 9, heads, d).transpose(1, 2).numpy()

        q, k, v = (split(lin(x)) for lin in (module.linear_q, module.linear_k, module.linear_v))
        ours = posenc.shaw_attention(q, k, v, table_k, max_relative_position=K)
        ours = module.linear_out(torch.from_numpy(ours).transpose(1, 2).reshape(2, 9, -1))
    np.testing.assert_allclose(ours.numpy(), peer.numpy(), rtol=1e-12, atol=1e-12)
