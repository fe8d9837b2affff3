"""shaw_attention: Shaw et al.'s attention o_i = Σ_j softmax_j(s_ij) (v_j + a^V_{row(i, j)}),
written here with a [q, k, d_v] gather (the implementation avoids building it), masks, the
all-masked row and max_relative_position 0 as plain attention plus table_v[0]."""

from __future__ import annotations

import numpy as np
import pytest

import posenc

from .mirror import golden_cases, implementation
from .test_shaw_scores import expected_scores, table_rows


def expected_attention(q, k, v, table_k, table_v, mask, max_relative_position: int,
                       scale: float | None) -> np.ndarray:
    scores = expected_scores(q, k, table_k, max_relative_position, scale)
    allowed = np.ones(scores.shape, bool) if mask is None else np.broadcast_to(mask, scores.shape)
    scores = np.where(allowed, scores, -np.inf)
    top = np.max(scores, axis=-1, keepdims=True)
    weights = np.where(allowed, np.exp(scores - np.where(np.isfinite(top), top, 0.0)), 0.0)
    total = np.sum(weights, axis=-1, keepdims=True)
    weights = np.divide(weights, total, out=np.zeros_like(weights), where=total > 0)
    out = weights @ np.asarray(v)
    if table_v is not None:
        rows = table_rows(q.shape[-2], k.shape[-2], max_relative_position)
        out = out + np.einsum("...ij,ijd->...id", weights, np.asarray(table_v)[rows])
    return out


@pytest.mark.parametrize("case", golden_cases("shaw_attention"), ids=lambda c: c.name)
def test_reference_and_implementation_match_the_gathered_attention(case) -> None:
    x = case.inputs
    expected = expected_attention(x["q"], x["k"], x["v"], x["table_k"], x.get("table_v"),
                                  x.get("mask"), case.params["max_relative_position"],
                                  case.params["scale"])
    np.testing.assert_allclose(case.output, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(implementation("shaw_attention", case)), expected,
                               rtol=1e-12, atol=1e-12)


def test_zero_reach_is_plain_attention_moved_by_the_first_value_row() -> None:
    rng = np.random.default_rng(5)
    q, k, v = rng.normal(size=(3, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 2))
    table_k, table_v = np.zeros((1, 4)), np.array([[0.25, -1.0]])
    out = posenc.shaw_attention(q, k, v, table_k, table_v, max_relative_position=0)
    scores = q @ k.T / 2.0
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    np.testing.assert_allclose(out, weights @ v + table_v[0], rtol=1e-13, atol=1e-14)
