"""shaw_scores / shaw_attention: bad inputs on every backend, hand-typed row tables, the
goldens against transformers' relative_key attention (Wav2Vec2-BERT) and against the
materialised tensor2tensor formulation, memory use, and mutants the properties must catch."""

from __future__ import annotations

import contextlib
import math
import tracemalloc

import numpy as np
import pytest

# torch before any TensorFlow import (transformers may pull TensorFlow in)
with contextlib.suppress(ImportError):
    import torch  # noqa: F401

from posenc import golden
from posenc.catalog import specs
from posenc.errors import ParameterError
from posenc.specs import resolve_params

Q = np.zeros((2, 3, 4))
K = np.zeros((2, 5, 4))
V = np.zeros((2, 5, 6))
TK = np.zeros((5, 4))  # K = 2
TV = np.zeros((5, 6))


# -- bad inputs ----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((Q, K, np.zeros((4, 4))), {}, r"table_k has shape \(4, 4\), expected 5 rows "
                                       r"\(2\*max_relative_position \+ 1 for "
                                       r"max_relative_position=2\)"),
        ((Q, K, np.zeros((5, 3))), {}, r"table_k has shape \(5, 3\), expected width 4 \(the last "
                                       r"dim of q and k\)"),
        ((Q, K, np.zeros((2, 5, 4))), {}, r"table_k must have shape \[2\*max_relative_position "
                                          r"\+ 1, d\], got shape \(2, 5, 4\)"),
        ((K, Q, TK), {}, r"q has q_len=5 > k_len=3: queries are aligned to the end of the keys"),
        ((Q, K[..., :3], TK), {}, r"q and k must have the same last dim, got shapes \(2, 3, 4\) "
                                  r"and \(2, 5, 3\)"),
        ((Q, np.zeros((3, 5, 4)), TK), {}, r"batch dims do not broadcast: q \(2,\), k \(3,\)"),
        ((Q[0, 0], K, TK), {}, r"q must have at least 2 dims"),
        ((Q.astype(int), K, TK), {}, r"q must have a real floating dtype, got int(32|64)"),
        ((Q, K, TK), {"max_relative_position": -1}, r"max_relative_position=-1 must be >= 0"),
        ((Q, K, TK), {"max_relative_position": True}, r"max_relative_position must be an int, "
                                                      r"got True \(bool\)"),
        ((Q, K, TK), {"max_relative_position": 2.0}, r"max_relative_position must be an int, "
                                                     r"got 2.0 \(float\)"),
        ((Q, K, TK), {"scale": 0.0}, r"scale=0.0 must be a finite number > 0"),
        ((Q, K, TK), {"scale": -1.0}, r"scale=-1.0 must be a finite number > 0"),
        ((Q, K, TK), {"scale": float("inf")}, r"scale=inf must be a finite number > 0"),
    ],
)
def test_bad_scores_inputs(pe, args, kwargs, message) -> None:
    kwargs = {"max_relative_position": 2, **kwargs}
    with pytest.raises(ParameterError, match=message):
        pe.shaw_scores(*args, **kwargs)


def test_mixed_dtypes() -> None:
    """(NumPy only: the JAX backend converts float64 inputs to float32 without x64.)"""
    import posenc

    with pytest.raises(ParameterError, match=r"q, k, table_k must share one dtype, got q "
                                             r"float64, k float64, table_k float32"):
        posenc.shaw_scores(Q, K, TK.astype(np.float32), max_relative_position=2)
    with pytest.raises(ParameterError, match=r"q, k, v, table_k, table_v must share one dtype, "
                                             r"got q float32, k float32, v float32, table_k "
                                             r"float32, table_v float64"):
        posenc.shaw_attention(*(a.astype(np.float32) for a in (Q, K, V, TK)), TV,
                              max_relative_position=2)


def test_max_relative_position_is_required(pe) -> None:
    with pytest.raises(TypeError, match="max_relative_position"):
        pe.shaw_scores(Q, K, TK)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((Q, K, V, TK, np.zeros((5, 4))), {}, r"table_v has shape \(5, 4\), expected width 6 "
                                              r"\(the last dim of v\)"),
        ((Q, K, V, TK, np.zeros((7, 6))), {}, r"table_v has shape \(7, 6\), expected 5 rows "
                                              r"\(2\*max_relative_position \+ 1 for "
                                              r"max_relative_position=2\)"),
        ((Q, K, V, np.zeros((3, 4)), TV), {}, r"table_k has shape \(3, 4\), expected 5 rows"),
        ((Q, K, V[:, :4], TK, TV), {}, r"k and v must have the same length \(axis -2\), got "
                                       r"shapes \(2, 5, 4\) and \(2, 4, 6\)"),
        ((K, Q, Q, TK), {}, r"q has q_len=5 > k_len=3"),
        ((Q, K, V, TK, TV), {"mask": np.ones((3, 5))}, r"mask must be boolean \(True = may "
                                                       r"attend\), got dtype float(32|64)"),
        ((Q, K, V, TK, TV), {"mask": np.ones((3, 4), bool)}, r"mask has shape \(3, 4\), which "
                                                             r"does not broadcast to the scores' "
                                                             r"shape \(2, 3, 5\)"),
        ((Q, K, V, TK), {"max_relative_position": -2}, r"max_relative_position=-2 must be >= 0"),
        ((Q, K, V, TK), {"scale": 0}, r"scale=0 must be a finite number > 0"),
    ],
)
def test_bad_attention_inputs(pe, args, kwargs, message) -> None:
    kwargs = {"max_relative_position": 2, **kwargs}
    with pytest.raises(ParameterError, match=message):
        pe.shaw_attention(*args, **kwargs)


def test_no_keys_give_an_empty_result(pe) -> None:
    """k_len = 0 (hence q_len = 0, queries sit at the end of the keys): an empty
    [..., 0, d_v] result in q's dtype, with the value term and a mask too."""
    from posenc.backends import get_backend

    backend = get_backend(pe.__name__.rsplit(".", 1)[-1])
    q, k, v = (np.ones(shape, np.float32) for shape in ((2, 0, 4), (2, 0, 4), (2, 0, 6)))
    tk, tv = TK.astype(np.float32), TV.astype(np.float32)
    for kwargs in ({}, {"mask": np.ones((0, 0), bool)}):
        for table_v in (None, tv):
            out = pe.shaw_attention(q, k, v, tk, table_v, max_relative_position=2, **kwargs)
            assert "float32" in str(out.dtype)
            assert backend.to_numpy(out).shape == (2, 0, 6)
    assert backend.to_numpy(pe.shaw_scores(q, k, tk, max_relative_position=2)).shape == (2, 0, 0)


def test_zero_width_queries_need_an_explicit_scale(pe) -> None:
    from posenc.backends import get_backend

    backend = get_backend(pe.__name__.rsplit(".", 1)[-1])
    q, k, v = np.ones((3, 0)), np.ones((3, 0)), np.arange(15.0).reshape(3, 5)
    with pytest.raises(ParameterError, match=r"q has shape \(3, 0\): its last dim d = 0 has no "
                                             r"default scale"):
        pe.shaw_scores(q, k, np.ones((5, 0)), max_relative_position=2)
    with pytest.raises(ParameterError, match=r"q has shape \(3, 0\)"):
        pe.shaw_attention(q, k, v, np.ones((5, 0)), max_relative_position=2)
    # scores all 0: every query averages the values (by hand: the mean of v's rows)
    out = pe.shaw_attention(q, k, v, np.ones((5, 0)), max_relative_position=2, scale=1.0)
    np.testing.assert_allclose(backend.to_numpy(out), np.broadcast_to(v.mean(axis=0), (3, 5)))


# -- row tables typed by hand from the definition row = clip(j − p_i, −K, K) + K -----------------

def _row_table(pe, q_len: int, k_len: int, K: int) -> np.ndarray:
    """The table row each pair uses, read back through shaw_scores: d = 1, q = 1, k = 0,
    table_k[r] = r and scale = 1 make s_ij the row index."""
    out = pe.shaw_scores(np.ones((q_len, 1)), np.zeros((k_len, 1)),
                         np.arange(2.0 * K + 1)[:, None], max_relative_position=K, scale=1.0)
    return np.asarray(out.numpy() if hasattr(out, "numpy") else out, dtype=np.float64)


def test_rows_self_attention(pe) -> None:
    assert _row_table(pe, 4, 4, 2).tolist() == [[2, 3, 4, 4],
                                                [1, 2, 3, 4],
                                                [0, 1, 2, 3],
                                                [0, 0, 1, 2]]


def test_rows_kv_cache_queries_sit_at_the_end(pe) -> None:
    # query positions 3 and 4 of 5 keys; distances key − query clipped to ±1
    assert _row_table(pe, 2, 5, 1).tolist() == [[0, 0, 0, 1, 2],
                                                [0, 0, 0, 0, 1]]


def test_rows_k_beyond_the_sequence(pe) -> None:
    # K = 5 > every distance: rows 5 + (j − i), rows 0 and 10 are never reached
    assert _row_table(pe, 3, 3, 5).tolist() == [[5, 6, 7], [4, 5, 6], [3, 4, 5]]


def test_rows_k_zero(pe) -> None:
    assert _row_table(pe, 2, 3, 0).tolist() == [[0, 0, 0], [0, 0, 0]]


def test_hf_bert_relative_key_is_the_reversed_table() -> None:
    """HF BERT's relative_key (transformers 4.x BertSelfAttention, typed here from its source:
    distance = position_ids_l - position_ids_r, row distance + max_position_embeddings - 1,
    scores (q kᵀ + einsum('bhld,lrd->bhlr', q, rows)) / sqrt(d)) is shaw_scores with the table
    flipped along its rows and K = max_position_embeddings - 1."""
    import posenc

    rng = np.random.default_rng(7)
    max_positions, seq, d = 6, 6, 4
    q, k = rng.standard_normal((2, 3, seq, d)), rng.standard_normal((2, 3, seq, d))
    table_bert = rng.standard_normal((2 * max_positions - 1, d))
    distance = np.arange(seq)[:, None] - np.arange(seq)[None, :]
    rows = table_bert[distance + max_positions - 1]
    bert = (q @ np.swapaxes(k, -1, -2) + np.einsum("bhld,lrd->bhlr", q, rows)) / math.sqrt(d)
    ours = posenc.shaw_scores(q, k, table_bert[::-1], max_relative_position=max_positions - 1)
    np.testing.assert_allclose(ours, bert, rtol=1e-13, atol=1e-13)


# -- second formulation: the materialised tensor2tensor way -------------------------------------

def _t2t_rows(q_len: int, k_len: int, K: int) -> np.ndarray:
    """tensor2tensor's _generate_relative_positions_matrix (not cache mode), transcribed:
    range_vec_q = range_vec_k[-length_q:], distance = range_vec_k[None] - range_vec_q[:, None]."""
    range_vec_k = np.arange(k_len)
    range_vec_q = range_vec_k[k_len - q_len:]
    distance = range_vec_k[None, :] - range_vec_q[:, None]
    return np.clip(distance, -K, K) + K


def _t2t_scores(q, k, table_k, K, scale):
    """_relative_attention_inner(q, k, relations_keys, transpose=True) with q pre-scaled."""
    relations_keys = table_k[_t2t_rows(q.shape[-2], k.shape[-2], K)]  # [q_len, k_len, d]
    q = q * scale
    return q @ np.swapaxes(k, -1, -2) + np.einsum("...id,ijd->...ij", q, relations_keys)


def _t2t_value_term(weights, table_v, K):
    """The relations_values half of _relative_attention_inner(weights, v, relations_values)."""
    relations_values = table_v[_t2t_rows(weights.shape[-2], weights.shape[-1], K)]
    return np.einsum("...ij,ijd->...id", weights, relations_values)


def _t2t_attention(q, k, v, table_k, table_v, mask, K, scale):
    scores = _t2t_scores(q, k, table_k, K, scale)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
    total = weights.sum(axis=-1, keepdims=True)
    weights = weights / np.where(total == 0, 1.0, total)
    out = weights @ v
    return out if table_v is None else out + _t2t_value_term(weights, table_v, K)


def _case(spec_id: str, name: str):
    spec = specs()[spec_id]
    case = golden.load(spec).cases[name]
    params = resolve_params(spec, case.params)
    scale = params["scale"] or 1.0 / math.sqrt(case.inputs["q"].shape[-1])
    return case, params["max_relative_position"], scale


@pytest.mark.parametrize("name", [c.name for c in specs()["shaw_scores"].cases])
def test_scores_golden_vs_materialised_t2t(name) -> None:
    case, K, scale = _case("shaw_scores", name)
    i = case.inputs
    np.testing.assert_allclose(case.output, _t2t_scores(i["q"], i["k"], i["table_k"], K, scale),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", [c.name for c in specs()["shaw_attention"].cases])
def test_attention_golden_vs_materialised_t2t(name) -> None:
    case, K, scale = _case("shaw_attention", name)
    i = case.inputs
    expected = _t2t_attention(i["q"], i["k"], i["v"], i["table_k"], i["table_v"], i["mask"],
                              K, scale)
    np.testing.assert_allclose(case.output, expected, rtol=1e-12, atol=1e-12)


# -- the peer: transformers' relative_key attention (Wav2Vec2-BERT) ------------------------------

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
    case, K, scale = _case("shaw_scores", name)
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
    case, K, scale = _case("shaw_attention", name)
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
        out = out + _t2t_value_term(weights, table_v, K)
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


# -- efficiency --------------------------------------------------------------------------------

def test_no_query_key_dim_tensor_is_built() -> None:
    """A [q_len, k_len, d] tensor of float64 would be 32 MiB here; shaw_attention's peak
    allocation must stay a few [q_len, k_len] arrays (0.5 MiB each)."""
    import posenc

    rng = np.random.default_rng(3)
    n, d, K = 256, 64, 16
    q, k, v = (rng.standard_normal((n, d)) for _ in range(3))
    table_k, table_v = rng.standard_normal((2 * K + 1, d)), rng.standard_normal((2 * K + 1, d))
    posenc.shaw_attention(q, k, v, table_k, table_v, max_relative_position=K)  # warm up
    tracemalloc.start()
    try:
        posenc.shaw_attention(q, k, v, table_k, table_v, max_relative_position=K)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, f"peak {peak / 2**20:.1f} MiB"


def test_huge_k_costs_only_the_reachable_rows() -> None:
    """K far beyond the sequence clips nothing: the result equals K = k_len - 1 with the
    matching middle rows of the table."""
    import posenc

    rng = np.random.default_rng(5)
    q, k, v = rng.standard_normal((3, 4)), rng.standard_normal((5, 4)), rng.standard_normal((5, 2))
    big, small = 1000, 4
    table_k, table_v = rng.standard_normal((2 * big + 1, 4)), rng.standard_normal((2 * big + 1, 2))
    middle = slice(big - small, big + small + 1)
    np.testing.assert_allclose(
        posenc.shaw_attention(q, k, v, table_k, table_v, max_relative_position=big),
        posenc.shaw_attention(q, k, v, table_k[middle], table_v[middle],
                              max_relative_position=small), rtol=1e-14, atol=1e-14)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit, imported by inductor
def test_torch_compile_fullgraph_with_dynamic_lengths() -> None:
    """The effective K (min(K, k_len - 1)) and the table slice must trace once the lengths
    are symbolic."""
    torch = pytest.importorskip("torch")
    import posenc

    def call(q, k, v, tk, tv, mask):
        return posenc.shaw_attention(q, k, v, tk, tv, max_relative_position=3, mask=mask)

    compiled = torch.compile(call, fullgraph=True)
    tk, tv = torch.randn(7, 4, dtype=torch.float64), torch.randn(7, 4, dtype=torch.float64)
    for q_len, k_len in ((5, 5), (3, 8), (2, 2)):  # the second call makes the lengths dynamic
        q = torch.randn(2, q_len, 4, dtype=torch.float64)
        k, v = (torch.randn(2, k_len, 4, dtype=torch.float64) for _ in range(2))
        mask = torch.rand(q_len, k_len) < 0.7
        torch.testing.assert_close(compiled(q, k, v, tk, tv, mask), call(q, k, v, tk, tv, mask),
                                   rtol=0, atol=1e-13)


# -- the properties catch classic porting bugs ---------------------------------------------------

def _failing_properties(backend) -> dict[str, set[str]]:
    from posenc.conformance import Options, run

    options = Options(backends=[backend], dtypes=["float64"], modes=["eager"], max_examples=5,
                      encodings=["shaw_scores", "shaw_attention"], cases=False)
    out: dict[str, set[str]] = {}
    for result in run(options):
        if result.failed:
            out.setdefault(result.check.encoding, set()).add(result.check.name)
    return out


def _mutant(**overrides):
    import dataclasses

    from posenc.backends import get_backend

    return dataclasses.replace(get_backend("numpy"), name="shaw-mutant", overrides=overrides)


def test_properties_pass_unbroken() -> None:
    from posenc.backends import get_backend

    assert _failing_properties(get_backend("numpy")) == {}


def test_query_minus_key_mutant_is_caught() -> None:
    """HF BERT's sign with a Shaw table: the rows reversed."""
    from posenc.encodings import shaw

    def scores(q, k, table_k, **kw):
        return shaw.shaw_scores(q, k, table_k[::-1], **kw)

    def attention(q, k, v, table_k, table_v=None, **kw):
        return shaw.shaw_attention(q, k, v, table_k[::-1],
                                   None if table_v is None else table_v[::-1], **kw)

    found = _failing_properties(_mutant(shaw_scores=scores, shaw_attention=attention))
    assert "shaw_scores_clipped_toeplitz" in found["shaw_scores"], found
    assert "shaw_value_term_buckets" in found["shaw_attention"], found


def test_start_aligned_queries_mutant_is_caught() -> None:
    """Queries at 0..q_len-1 instead of the end of the keys (the KV-cache bug)."""
    from posenc.encodings import shaw

    def start_aligned(fn):
        def call(q, k, *args, mask=None, **kw):
            pad = k.shape[-2] - q.shape[-2]
            q_full = np.concatenate([q, np.zeros((*q.shape[:-2], pad, q.shape[-1]))], axis=-2)
            if mask is not None:
                mask = np.concatenate([np.broadcast_to(mask, (q.shape[-2], k.shape[-2])),
                                       np.ones((pad, k.shape[-2]), bool)], axis=-2)
                kw["mask"] = mask
            return fn(q_full, k, *args, **kw)[..., : q.shape[-2], :]
        return call

    found = _failing_properties(_mutant(shaw_scores=start_aligned(shaw.shaw_scores),
                                        shaw_attention=start_aligned(shaw.shaw_attention)))
    assert "shaw_kv_cache_rows" in found["shaw_scores"], found
    assert "shaw_kv_cache_rows" in found["shaw_attention"], found


def test_unclipped_value_buckets_mutant_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The value term's end rows taking only the keys exactly at ±K, not the whole tails."""
    from posenc.encodings import shaw

    def no_tails(xp, a, K, offset):
        q_len, k_len = a.shape[-2:]
        keys = np.arange(q_len)[:, None] + offset + np.arange(-K, K + 1)[None, :]
        inside = (keys >= 0) & (keys < k_len)
        picked = np.take_along_axis(a, np.broadcast_to(np.where(inside, keys, 0),
                                                       (*a.shape[:-2], *keys.shape)), axis=-1)
        return np.where(inside, picked, 0.0)

    from posenc.backends import get_backend

    monkeypatch.setattr(shaw, "_bucket_weights", no_tails)
    found = _failing_properties(get_backend("numpy"))
    assert "shaw_value_term_buckets" in found.get("shaw_attention", set()), found
    assert "shaw_scores" not in found, found
