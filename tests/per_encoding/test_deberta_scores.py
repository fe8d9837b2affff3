"""deberta_scores: DeBERTa's disentangled attention scores, content-to-content plus
content-to-position (q · K^r[c(i - j)]) plus position-to-content (k · Q^r[c(i - j)]), scaled by
1/sqrt(d (1 + #tables)), written here with einsum over this file's own row indices."""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc

from .mirror import golden_cases, implementation
from .test_deberta_bucket import expected_buckets


def expected_scores(q, k, rel_k, rel_q, position_buckets: int, max_relative_positions: int,
                    clamp: str, scale: float | None) -> np.ndarray:
    q_len, k_len, d = q.shape[-2], k.shape[-2], q.shape[-1]
    delta = np.arange(q_len)[:, None] - np.arange(k_len)[None, :]
    span = position_buckets if position_buckets > 0 else max_relative_positions
    if position_buckets > 0:
        delta = expected_buckets(delta, position_buckets, max_relative_positions, clamp)
    row = np.clip(delta + span, 0, 2 * span - 1)
    scores = np.einsum("...id,...jd->...ij", q, k)
    tables = [t for t in (rel_k, rel_q) if t is not None]
    if rel_k is not None:
        scores = scores + np.einsum("...id,...ijd->...ij", q, rel_k[..., row, :])
    if rel_q is not None:
        scores = scores + np.einsum("...jd,...ijd->...ij", k, rel_q[..., row, :])
    return scores * (scale if scale is not None else 1 / math.sqrt(d * (1 + len(tables))))


def test_one_dimension_by_hand() -> None:
    """d = 1, q = [1, 2], k = [3, 5], no buckets, span 2: rows c = clip(i - j + 2, 0, 3)."""
    q, k = np.array([[1.0], [2.0]]), np.array([[3.0], [5.0]])
    rel_k = np.array([[10.0], [20.0], [30.0], [40.0]])  # rows 0..3
    out = posenc.deberta_scores(q, k, rel_k, position_buckets=0, max_relative_positions=2)
    # c(0,0) = 2, c(0,1) = 1, c(1,0) = 3, c(1,1) = 2; scale 1/sqrt(2)
    expected = np.array([[1 * 3 + 1 * 30, 1 * 5 + 1 * 20], [2 * 3 + 2 * 40, 2 * 5 + 2 * 30]])
    np.testing.assert_allclose(out, expected / math.sqrt(2), rtol=1e-15)


@pytest.mark.parametrize("case", golden_cases("deberta_scores"), ids=lambda c: c.name)
def test_reference_and_implementation_match_the_einsum(case) -> None:
    p = case.params
    inputs = {name: case.inputs.get(name) for name in ("q", "k", "rel_k", "rel_q")}
    expected = expected_scores(*inputs.values(), p["position_buckets"], p["max_relative_positions"],
                               p["clamp"], p["scale"])
    np.testing.assert_allclose(case.output, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(implementation("deberta_scores", case)), expected,
                               rtol=1e-12, atol=1e-12)
