"""deberta_bucket / deberta_scores goldens against transformers' DeBERTa-v2
(make_log_bucket_position, build_relative_position,
DisentangledSelfAttention.disentangled_attention_bias), including the documented float32 ties."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest

# torch before any TensorFlow import (transformers may pull TensorFlow in)
with contextlib.suppress(ImportError):
    import torch  # noqa: F401

from posenc import golden
from posenc.catalog import specs
from posenc.specs import resolve_params

# transformers' float32 log minus the exact bucket, at the ties of the float32_tie cases only
HF_DIVERGENCE = {
    "float32_tie_ratio_16_9": {12: 1, -12: -1},
    "float32_tie_ratio_7_3": {49: 1, -49: -1},
}


@pytest.mark.oracle
@pytest.mark.parametrize("name", [c.name for c in specs()["deberta_bucket"].cases])
def test_bucket_golden_vs_transformers(name) -> None:
    torch = pytest.importorskip("torch")
    v2 = pytest.importorskip("transformers.models.deberta_v2.modeling_deberta_v2")
    spec = specs()["deberta_bucket"]
    case = golden.load(spec).cases[name]
    p = resolve_params(spec, case.params)
    rel = case.inputs["relative_position"]
    r = torch.from_numpy(rel)
    if p["clamp"] == "original":  # microsoft/DeBERTa's clamp, in front of the same formula
        r = torch.clamp(r, 1 - p["max_position"], p["max_position"] - 1)
    theirs = v2.make_log_bucket_position(r, p["bucket_size"], p["max_position"]).long().numpy()
    diff = theirs - case.output
    found = {int(a): int(b) for a, b in zip(rel[diff != 0], diff[diff != 0], strict=True)}
    expected = HF_DIVERGENCE.get(name, {})
    assert found == expected, f"transformers − golden at {found}, documented {expected}"


@pytest.mark.oracle
def test_relative_grid_vs_build_relative_position() -> None:
    torch = pytest.importorskip("torch")
    v2 = pytest.importorskip("transformers.models.deberta_v2.modeling_deberta_v2")
    spec = specs()["deberta_bucket"]
    case = golden.load(spec).cases["relative_grid"]
    p = resolve_params(spec, case.params)
    q_len, k_len = case.output.shape
    theirs = v2.build_relative_position(torch.zeros(q_len, 1), torch.zeros(k_len, 1),
                                        bucket_size=p["bucket_size"],
                                        max_position=p["max_position"])
    np.testing.assert_array_equal(theirs[0].numpy(), case.output)
    np.testing.assert_array_equal(case.inputs["relative_position"],
                                  np.arange(q_len)[:, None] - np.arange(k_len)[None, :])


@pytest.mark.oracle
def test_transformers_float32_far_beyond_max_position() -> None:
    """The spec's measured claim: with the v3 defaults transformers' float32 log equals the
    exact bucket for every |r| < 65317 and first differs there (one bucket low), far beyond
    max_position, where DisentangledSelfAttention clips every bucket to the last table row."""
    torch = pytest.importorskip("torch")
    v2 = pytest.importorskip("transformers.models.deberta_v2.modeling_deberta_v2")
    import posenc

    rel = np.arange(-70000, 70001)
    theirs = v2.make_log_bucket_position(torch.from_numpy(rel), 256, 512).long().numpy()
    ours = posenc.deberta_bucket(rel)
    wrong = np.abs(rel[theirs != ours])
    assert wrong.min() == 65317
    assert theirs[rel == 65317] == 700 and ours[rel == 65317] == 701


def _hf_scores(inputs: dict[str, np.ndarray | None], p: dict) -> np.ndarray:
    """The scores of transformers' DebertaV2 DisentangledSelfAttention.forward:
    q·kᵀ/scaled_size_sqrt + disentangled_attention_bias, in float64. The flattened leading
    dims are its heads. Its relative embeddings are [rel_k | rel_q] side by side (hidden size
    2·heads·d), and pos_key_proj / pos_query_proj select one half each with an identity block,
    so the projected tables are the given ones exactly."""
    import torch
    from transformers import DebertaV2Config
    from transformers.models.deberta_v2.modeling_deberta_v2 import (
        DisentangledSelfAttention,
        make_log_bucket_position,
        scaled_size_sqrt,
    )

    q, k = inputs["q"], inputs["k"]
    terms = {"c2p": inputs["rel_k"], "p2c": inputs["rel_q"]}
    terms = {t: a for t, a in terms.items() if a is not None}
    lead = np.broadcast_shapes(*(a.shape[:-2] for a in (q, k, *terms.values())))
    heads, (q_len, d), k_len = math.prod(lead), q.shape[-2:], k.shape[-2]
    span = p["position_buckets"] if p["position_buckets"] > 0 else p["max_relative_positions"]
    length = max(q_len, k_len)  # its p2c path fails for q_len != k_len: pad to a square

    def flat(a: np.ndarray, rows: int) -> np.ndarray:
        a = np.broadcast_to(a, (*lead, *a.shape[-2:])).reshape(heads, a.shape[-2], d)
        return np.concatenate([a, np.zeros((heads, rows - a.shape[1], d))], axis=1)

    ql, kl = (torch.from_numpy(flat(a, length)) for a in (q, k))
    factor = 1 + len(terms)
    scores = torch.bmm(ql, kl.transpose(-1, -2) / scaled_size_sqrt(ql, factor).double())
    if terms:
        width = heads * d
        config = DebertaV2Config(
            hidden_size=2 * width, num_attention_heads=heads, attention_head_size=d,
            relative_attention=True, position_buckets=p["position_buckets"],
            max_relative_positions=p["max_relative_positions"], pos_att_type=list(terms))
        module = DisentangledSelfAttention(config).double().eval()
        halves = {"c2p": 0, "p2c": 1}
        embeddings = np.zeros((2 * span, 2 * width))
        relative_pos = None
        if p["clamp"] == "original" and p["position_buckets"] > 0:
            ids = torch.arange(length)
            r = torch.clamp(ids[:, None] - ids[None, :], 1 - p["max_relative_positions"],
                            p["max_relative_positions"] - 1)
            relative_pos = make_log_bucket_position(r, p["position_buckets"],
                                                    p["max_relative_positions"]).long()
        with torch.no_grad():
            for term, table in terms.items():
                half = halves[term]
                # [heads, rows, d] -> [rows, heads·d], the layout transpose_for_scores undoes
                embeddings[:, half * width:(half + 1) * width] = (
                    flat(table, 2 * span).transpose(1, 0, 2).reshape(2 * span, width))
                proj = module.pos_key_proj if term == "c2p" else module.pos_query_proj
                weight = torch.zeros(width, 2 * width, dtype=torch.float64)
                weight[:, half * width:(half + 1) * width] = torch.eye(width)
                proj.weight.copy_(weight)
                proj.bias.zero_()
            scores = scores + module.disentangled_attention_bias(
                ql, kl, relative_pos, torch.from_numpy(embeddings), factor)
    out = scores[:, :q_len, :k_len].numpy().reshape(*lead, q_len, k_len)
    if p["scale"] is not None:  # transformers always scales by 1/sqrt(d·factor)
        out = out * math.sqrt(d * factor) * p["scale"]
    return out


@pytest.mark.oracle
@pytest.mark.parametrize("name", [c.name for c in specs()["deberta_scores"].cases])
def test_scores_golden_vs_transformers(name) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    spec = specs()["deberta_scores"]
    case = golden.load(spec).cases[name]
    theirs = _hf_scores(case.inputs, resolve_params(spec, case.params))
    assert theirs.shape == case.output.shape
    # scaled_size_sqrt is a float32 sqrt: relative error up to ~6e-8
    np.testing.assert_allclose(theirs, case.output, rtol=2e-7, atol=1e-12)


@pytest.mark.oracle
def test_transformers_p2c_fails_for_cross_lengths() -> None:
    """Why the oracle pads to a square: transformers' own q_len != k_len p2c path (build_rpos,
    with position_buckets and max_relative_positions passed swapped) builds a [k_len, k_len]
    term: alone it has the wrong shape, next to c2p's [q_len, k_len] term it raises."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.deberta_v2.modeling_deberta_v2 import DisentangledSelfAttention

    q, k = torch.zeros(1, 3, 4, dtype=torch.float64), torch.zeros(1, 5, 4, dtype=torch.float64)
    embeddings = torch.zeros(8, 4, dtype=torch.float64)
    for terms in (["p2c"], ["p2c", "c2p"]):
        config = transformers.DebertaV2Config(hidden_size=4, num_attention_heads=1,
                                              relative_attention=True, position_buckets=4,
                                              max_relative_positions=6, pos_att_type=terms)
        module = DisentangledSelfAttention(config).double().eval()
        if terms == ["p2c"]:
            bias = module.disentangled_attention_bias(q, k, None, embeddings, 2)
            assert tuple(bias.shape) == (1, 5, 5)  # not [1, q_len, k_len] = [1, 3, 5]
        else:
            with pytest.raises(RuntimeError, match="must match the size"):
                module.disentangled_attention_bias(q, k, None, embeddings, 3)
