"""t5_bias: T5's bias is the table row of each (query, key) bucket, with queries at
query_offset + i; built here by fancy indexing from this file's own bucket rule, and a KV-cache
decode step by hand."""

from __future__ import annotations

import numpy as np
import pytest

import posenc

from .mirror import golden_cases, implementation
from .test_t5_bucket import expected_buckets


def expected_bias(table: np.ndarray, q_len: int, k_len: int, bidirectional: bool,
                  num_buckets: int, max_distance: int, query_offset: int) -> np.ndarray:
    relative = np.arange(k_len)[None, :] - (query_offset + np.arange(q_len))[:, None]
    buckets = expected_buckets(relative, bidirectional, num_buckets, max_distance)
    return np.moveaxis(np.asarray(table)[buckets], -1, 0)  # [q, k, heads] -> [heads, q, k]


def test_decode_step_uses_the_real_query_position() -> None:
    """One query at position 3 over keys 0..3, decoder, 32 buckets: distances 3, 2, 1, 0 take
    buckets 3, 2, 1, 0, so the row reads the table backwards."""
    table = np.arange(64, dtype=np.float64).reshape(32, 2)
    out = posenc.t5_bias(1, 4, table, bidirectional=False, query_offset=3)
    np.testing.assert_array_equal(out[:, 0, :], [[6, 4, 2, 0], [7, 5, 3, 1]])


@pytest.mark.parametrize("case", golden_cases("t5_bias"), ids=lambda c: c.name)
def test_reference_and_implementation_copy_the_table_entries(case) -> None:
    p = case.params
    expected = expected_bias(case.inputs["table"], p["q_len"], p["k_len"], p["bidirectional"],
                             p["num_buckets"], p["max_distance"], p["query_offset"])
    np.testing.assert_array_equal(case.output, expected)
    np.testing.assert_array_equal(np.asarray(implementation("t5_bias", case)), expected)
