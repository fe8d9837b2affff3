"""Dual Chunk Attention: bad inputs on every backend; the goldens against vLLM's
DualChunkRotaryEmbedding (its cos/sin caches and forward_native, transcribed from
vllm/model_executor/layers/rotary_embedding/dual_chunk_rope.py: vLLM is not installed here),
and the spec's rule for which query form meets which key against the chunk loop of vLLM's
DualChunkFlashAttentionImpl._dual_chunk_flash_attn_prefill_func (transcribed, dense)."""

from __future__ import annotations

import numpy as np
import pytest

from posenc import golden
from posenc.catalog import specs
from posenc.errors import ParameterError

Q = np.linspace(-1, 1, 2 * 6 * 8).reshape(2, 6, 8)
K = np.linspace(1, -1, 6 * 8).reshape(1, 6, 8)


@pytest.mark.parametrize(
    ("q", "k", "positions", "kwargs", "message"),
    [
        (Q, K, None, {"chunk_size": 1}, r"chunk_size=1 must be >= 2"),
        (Q, K, None, {"chunk_size": 8.5}, r"chunk_size must be an int, got 8.5"),
        (Q, K, None, {"chunk_size": True}, r"chunk_size must be an int, got True"),
        (Q, K, None, {"local_size": -1}, r"local_size=-1 must be >= 0"),
        (Q, K, None, {"chunk_size": 8, "local_size": 8},
         r"local_size=8 must be < chunk_size=8: the chunk length chunk_size - local_size = 0"),
        (Q, K, None, {"critical": "yes"}, r"critical must be a bool, got 'yes'"),
        (Q, K, None, {"layout": "neox"}, r"layout='neox' is not one of"),
        (Q, K, None, {"rotary_dim": 3}, r"rotary_dim=3 must be even"),
        (Q, K[:, :5], None, {}, r"q has shape \(2, 6, 8\) and k \(1, 5, 8\)"),
        (Q, K[..., :6], None, {}, r"q has shape \(2, 6, 8\) and k \(1, 6, 6\)"),
        (Q[0, 0], K, None, {}, r"q must be an array of shape \[..., seq, dim\], got \(8,\)"),
        (Q, K, np.arange(6) * 1.0, {}, r"positions must have an integer dtype, got float(32|64)"),
    ],
)
def test_bad_input_raises_a_parameter_error_naming_it(pe, q, k, positions, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.dual_chunk_attention(q, k, positions, **kwargs)


def _params(case: golden.GoldenCase) -> dict:
    spec = specs()["dual_chunk_attention"]
    return {**{n: d["default"] for n, d in spec.parameters.items()}, **case.params}


def _split(case: golden.GoldenCase) -> tuple[np.ndarray, np.ndarray]:
    """([3, *q.shape] q_intra, q_succ, q_inter; k_embed) of a golden's output (stacked when q
    and k have one shape, else flattened end to end)."""
    q, k = case.inputs["q"], case.inputs["k"]
    if q.shape == k.shape:
        return case.output[:3], case.output[3]
    return case.output[: 3 * q.size].reshape(3, *q.shape), case.output[3 * q.size:].reshape(k.shape)


def _vllm_dual_chunk_rope(torch, positions, query, key, *, head_size, rotary_dim, base,
                          neox, chunk_size, local_size, max_position_embeddings):
    """vLLM's DualChunkRotaryEmbedding on flat tokens (query [tokens, heads, head_size]), in
    float64: the five query tables and the key table indexed as forward_native does."""
    inv_freq = 1.0 / base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    chunk_len = chunk_size - local_size
    steps = torch.arange(chunk_len, dtype=torch.float64)
    tables = {
        "q": steps,
        "qc": (steps + chunk_len).clamp(max=chunk_size),
        "k": torch.arange(max_position_embeddings, dtype=torch.float64) % chunk_len,
        "qc_no_clamp": steps + chunk_len,
        "q_inter": steps + chunk_size,
    }
    cos_sin = {name: torch.cat([torch.outer(t, inv_freq).cos(), torch.outer(t, inv_freq).sin()],
                               dim=-1) for name, t in tables.items()}

    def rotate(cs, x):  # cs [tokens, rotary_dim]; x [tokens, heads, head_size]
        cos, sin = cs.chunk(2, dim=-1)
        rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
        if neox:
            cos, sin = cos.repeat(1, 2)[:, None], sin.repeat(1, 2)[:, None]
            x1, x2 = rot[..., : rotary_dim // 2], rot[..., rotary_dim // 2:]
            turned = torch.cat([-x2, x1], dim=-1)
        else:
            cos = cos.repeat_interleave(2, dim=-1)[:, None]
            sin = sin.repeat_interleave(2, dim=-1)[:, None]
            turned = torch.stack([-rot[..., 1::2], rot[..., 0::2]], dim=-1).flatten(-2)
        return torch.cat([rot * cos + turned * sin, rest], dim=-1)

    within = positions % chunk_len
    return {
        "key": rotate(cos_sin["k"][positions], key),
        "query": rotate(cos_sin["q"][within], query),
        "query_succ": rotate(cos_sin["qc"][within], query),
        "query_inter": rotate(cos_sin["qc"][chunk_len - 1].repeat(positions.shape[0], 1), query),
        "query_succ_critical": rotate(cos_sin["qc_no_clamp"][within], query),
        "query_inter_critical": rotate(cos_sin["q_inter"][within], query),
    }


@pytest.mark.parametrize("case_name", [c.name for c in specs()["dual_chunk_attention"].cases])
def test_oracle_vllm_dual_chunk_rotary_embedding(case_name) -> None:
    """The golden's four outputs are vLLM's key, query, query_succ and query_inter (or, with
    critical, its query_succ_critical and query_inter_critical), token by token."""
    torch = pytest.importorskip("torch")
    spec = specs()["dual_chunk_attention"]
    case = golden.load(spec).cases[case_name]
    p = _params(case)
    q, k = case.inputs["q"], case.inputs["k"]
    seq, dim = q.shape[-2], q.shape[-1]
    positions = case.inputs["positions"]
    positions = np.arange(seq) if positions is None else positions
    rows = positions if positions.ndim == 2 else positions[None]
    expected, expected_k = _split(case)
    for b, row in enumerate(rows):
        def tokens(x, b=b):  # [..., heads, seq, dim] -> [seq, heads, dim] of batch row b
            x = x[b] if positions.ndim == 2 else x
            return torch.tensor(x.reshape(-1, seq, dim)).transpose(0, 1)

        def back(t, like, b=b):
            out = t.transpose(0, 1).numpy()
            shape = like[b].shape if positions.ndim == 2 else like.shape
            return out.reshape(shape)

        peer = _vllm_dual_chunk_rope(
            torch, torch.tensor(row), tokens(q), tokens(k), head_size=dim,
            rotary_dim=p["rotary_dim"] or dim, base=p["base"], neox=p["layout"] == "half",
            chunk_size=p["chunk_size"], local_size=p["local_size"],
            max_position_embeddings=int(row.max()) + 1)
        names = (("query", "query_succ_critical", "query_inter_critical") if p["critical"]
                 else ("query", "query_succ", "query_inter"))
        for form, name in enumerate(names):
            got = expected[form][b] if positions.ndim == 2 else expected[form]
            np.testing.assert_allclose(got, back(peer[name], q), rtol=1e-9, atol=1e-9,
                                       err_msg=f"{case_name}: {name}")
        got_k = expected_k[b] if positions.ndim == 2 else expected_k
        np.testing.assert_allclose(got_k, back(peer["key"], k), rtol=1e-9, atol=1e-9,
                                   err_msg=f"{case_name}: key")


def _attend(q, k, v, causal):
    """softmax(q k^T) v and its log-sum-exp, q [m, d], k and v [n, d]; causal aligns the last
    query with the last key (flash attention's convention)."""
    logits = q @ k.T
    if causal:
        m, n = logits.shape
        logits = np.where(np.arange(n)[None] <= np.arange(m)[:, None] + n - m, logits, -np.inf)
    top = logits.max(axis=-1, keepdims=True)
    weights = np.exp(logits - top)
    return (weights @ v) / weights.sum(-1, keepdims=True), (top + np.log(
        weights.sum(-1, keepdims=True)))[:, 0]


def _vllm_prefill(q, q_succ, q_inter, k, v, chunk_len):
    """DualChunkFlashAttentionImpl's prefill loop for one head, dense: each chunk of queries
    attends causally to its own chunk with q, to the previous chunk with q_succ, to all earlier
    ones with q_inter; the parts merged by their log-sum-exps."""
    n, out = k.shape[0], []
    for start in range(0, n, chunk_len):
        end = min(start + chunk_len, n)
        parts = [_attend(q[start:end], k[start:end], v[start:end], causal=True)]
        if start - chunk_len >= 0:
            parts.append(_attend(q_succ[start:end], k[start - chunk_len:start],
                                 v[start - chunk_len:start], causal=False))
        if start - 2 * chunk_len >= 0:
            parts.append(_attend(q_inter[start:end], k[: start - chunk_len],
                                 v[: start - chunk_len], causal=False))
        outputs = np.stack([o for o, _ in parts])
        lse = np.stack([s for _, s in parts])
        weights = np.exp(lse - lse.max(axis=0))
        weights /= weights.sum(axis=0)
        out.append((outputs * weights[..., None]).sum(axis=0))
    return np.concatenate(out)


@pytest.mark.parametrize("case_name", ["chunk_edges", "local_window_wider_than_chunk",
                                       "no_local_window"])
def test_spec_logit_rule_matches_vllm_chunk_loop(case_name) -> None:
    """Attention with the spec's logit(i, j) = q_form(i, j) · k_j (form by floor(j/L) against
    floor(i/L)) over the golden's rotated tensors equals vLLM's chunked prefill on the same
    tensors (positions arange(seq))."""
    spec = specs()["dual_chunk_attention"]
    case = golden.load(spec).cases[case_name]
    p = _params(case)
    q = case.inputs["q"]
    assert case.inputs["positions"] is None
    heads, seq, dim = q.shape[-3], q.shape[-2], q.shape[-1]
    forms, k_out = _split(case)
    forms, k_out = forms.reshape(3, heads, seq, dim), k_out.reshape(-1, seq, dim)[0]
    v = np.random.default_rng(7).standard_normal((seq, dim))
    chunk_len = p["chunk_size"] - p["local_size"]
    chunk = np.arange(seq) // chunk_len
    gap = chunk[:, None] - chunk[None, :]
    pick = np.where(gap == 0, 0, np.where(gap == 1, 1, 2))
    for h in range(heads):
        logits = np.einsum("fid,jd->fij", forms[:, h], k_out)
        logits = np.take_along_axis(logits, pick[None], axis=0)[0]
        logits = np.where(np.arange(seq)[None] <= np.arange(seq)[:, None], logits, -np.inf)
        weights = np.exp(logits - logits.max(-1, keepdims=True))
        dense = (weights / weights.sum(-1, keepdims=True)) @ v
        looped = _vllm_prefill(forms[0, h], forms[1, h], forms[2, h], k_out, v, chunk_len)
        np.testing.assert_allclose(dense, looped, rtol=1e-12, atol=1e-12)
