"""Broken deberta_bucket / deberta_scores implementations the harness must catch, and
transformers' float32 buckets, which it must flag at the documented ties only."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest

# torch before any TensorFlow import (transformers may pull TensorFlow in)
with contextlib.suppress(ImportError):
    import torch  # noqa: F401

from posenc.encodings import public_functions

from ..failing import failing_by_encoding
from ..mutants.overrides import _mutant

_IMPL = public_functions()


def _failing(backend, encodings=("deberta_bucket", "deberta_scores")) -> dict[str, set[str]]:
    return failing_by_encoding(backend, encodings=encodings, max_examples=6)


def _hf_bucket(relative_position, *, bucket_size=256, max_position=512, clamp="transformers"):
    import torch
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    r = torch.from_numpy(np.asarray(relative_position))
    if clamp == "original":
        r = torch.clamp(r, 1 - max_position, max_position - 1)
    return make_log_bucket_position(r, bucket_size, max_position).long().numpy()


@pytest.mark.oracle
def test_transformers_float32_buckets_fail_exactly_the_tie_checks() -> None:
    """transformers' float32 log as a deberta_bucket backend: the harness flags the two tie
    cases and the exactness check of the configuration with a tie, and nothing else."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    found = _failing(_mutant("hf_float32_log", deberta_bucket=_hf_bucket), ["deberta_bucket"])
    assert found == {"deberta_bucket": {
        "case:float32_tie_ratio_16_9", "case:float32_tie_ratio_7_3",
        "property:deberta_bucket_exact[bucket_size=18,max_position=17]"}}


def _scores_paper_p2c(q, k, rel_k=None, rel_q=None, *, position_buckets=256,
                      max_relative_positions=512, clamp="transformers", scale=None):
    """The paper's eq.: the position-to-content term k_j·rel_q[c(j − i)], i.e. δ(j, i)."""
    kw = {"position_buckets": position_buckets, "max_relative_positions": max_relative_positions,
          "clamp": clamp}
    terms = 1 + (rel_k is not None) + (rel_q is not None)
    scale = scale or 1 / math.sqrt(q.shape[-1] * terms)
    out = _IMPL["deberta_scores"](q, k, rel_k, scale=scale, **kw)
    if rel_q is None:
        return out
    span = position_buckets if position_buckets > 0 else max_relative_positions
    key_minus_query = np.arange(k.shape[-2])[None, :] - np.arange(q.shape[-2])[:, None]
    delta = key_minus_query if position_buckets <= 0 else _IMPL["deberta_bucket"](
        key_minus_query, bucket_size=position_buckets, max_position=max_relative_positions,
        clamp=clamp)
    rows = np.clip(delta + span, 0, 2 * span - 1)  # [q_len, k_len]
    p2c = k @ np.swapaxes(rel_q, -1, -2)  # [..., k_len, 2·span]
    cols = np.arange(k.shape[-2])[None, :]
    return out + scale * p2c[..., cols, rows]


def _bucket_without_sign(relative_position, **kw):
    """|bucket|: the log bucket of the magnitude, the sign dropped."""
    return np.abs(_IMPL["deberta_bucket"](relative_position, **kw))


def test_paper_p2c_index_and_unsigned_buckets_are_caught() -> None:
    found = _failing(_mutant("paper_p2c", deberta_scores=_scores_paper_p2c), ["deberta_scores"])
    assert set(found) == {"deberta_scores"}
    assert {"case:v3_base_both", "case:p2c_only",
            "property:deberta_scores_p2c_same_index[max_relative_positions=10,"
            "position_buckets=8]"} <= found["deberta_scores"], found
    found = _failing(_mutant("unsigned", deberta_bucket=_bucket_without_sign), ["deberta_bucket"])
    names = found["deberta_bucket"]
    assert "case:v3_base_window" in names
    assert any(n.startswith("property:deberta_bucket_symmetric_monotone") for n in names)
