"""shaw_scores: Shaw et al.'s (2018) relative scores q_i · (k_j + a^K_{clip(j - p_i, -K, K)}) ·
scale, queries at the end of the keys, written here by gathering a [q, k, d] table and a
contraction, and one pair by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc

from .mirror import golden_cases, implementation


def table_rows(q_len: int, k_len: int, max_relative_position: int) -> np.ndarray:
    """[q_len, k_len] rows of the relative table: clip(key - query, -K, K) + K, query row i at
    position k_len - q_len + i."""
    distance = np.arange(k_len)[None, :] - (k_len - q_len + np.arange(q_len))[:, None]
    return np.clip(distance, -max_relative_position, max_relative_position) + max_relative_position


def expected_scores(q, k, table_k, max_relative_position: int, scale: float | None) -> np.ndarray:
    rows = table_rows(q.shape[-2], k.shape[-2], max_relative_position)
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    relative = np.einsum("...id,ijd->...ij", q, np.asarray(table_k)[rows])
    return (np.einsum("...id,...jd->...ij", q, k) + relative) * s


def test_two_keys_by_hand() -> None:
    """d = 1, K = 1, one query at position 1 over keys 0, 1: distances -1, 0 take rows 0, 1."""
    q, k, table = np.array([[2.0]]), np.array([[3.0], [5.0]]), np.array([[10.0], [20.0], [30.0]])
    out = posenc.shaw_scores(q, k, table, max_relative_position=1)
    np.testing.assert_allclose(out, [[2 * (3 + 10), 2 * (5 + 20)]], rtol=1e-15)


@pytest.mark.parametrize("case", golden_cases("shaw_scores"), ids=lambda c: c.name)
def test_reference_and_implementation_match_the_contraction(case) -> None:
    p = case.params
    expected = expected_scores(case.inputs["q"], case.inputs["k"], case.inputs["table_k"],
                               p["max_relative_position"], p["scale"])
    np.testing.assert_allclose(case.output, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(implementation("shaw_scores", case)), expected,
                               rtol=1e-12, atol=1e-12)
