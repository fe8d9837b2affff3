"""t5_bucket: T5's bucketing of key-minus-query distances (Raffel et al. 2020; transformers'
_relative_position_bucket) written here in float64 NumPy, with the exact integer comparison at
the boundaries where a logarithm cannot decide, and T5's default buckets by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc

from .mirror import golden_cases, implementation


def _log_bucket(n: int, max_exact: int, max_distance: int, log_buckets: int) -> int:
    """floor(e log(n/m) / log(D/m)), capped at e - 1; where the float quotient is within 1e-9 of
    an integer, the largest k with D^k m^e <= n^e m^k, in integers."""
    value = log_buckets * math.log(n / max_exact) / math.log(max_distance / max_exact)
    if abs(value - round(value)) < 1e-9:
        k = round(value)
        if max_distance ** k * max_exact ** log_buckets > n ** log_buckets * max_exact ** k:
            k -= 1
        value = k
    return min(math.floor(value), log_buckets - 1)


def expected_buckets(relative: np.ndarray, bidirectional: bool, num_buckets: int,
                     max_distance: int) -> np.ndarray:
    per_side = num_buckets // 2 if bidirectional else num_buckets

    def one(r: int) -> int:
        offset = per_side if bidirectional and r > 0 else 0
        n = abs(r) if bidirectional else max(-r, 0)
        max_exact = per_side // 2
        if n < max_exact:
            return offset + n
        return offset + max_exact + _log_bucket(n, max_exact, max_distance, per_side - max_exact)

    return np.vectorize(one, otypes=[np.int64])(np.asarray(relative, dtype=np.int64))


def test_t5_defaults_by_hand() -> None:
    """32 buckets, max_distance 128, encoder: 0..7 exact, 8 starts the log range, 128 and beyond
    the last bucket of a side; keys after the query on the upper 16."""
    rel = np.array([0, -1, -7, -8, -127, -128, -1000, 1, 7, 128])
    out = posenc.t5_bucket(rel)
    np.testing.assert_array_equal(out, [0, 1, 7, 8, 15, 15, 15, 17, 23, 31])


def test_decoder_sends_later_keys_to_bucket_zero() -> None:
    rel = np.array([5, 1, 0, -1, -15, -16, -200])
    out = posenc.t5_bucket(rel, bidirectional=False)
    np.testing.assert_array_equal(out, expected_buckets(rel, False, 32, 128))
    np.testing.assert_array_equal(out[:3], 0)


@pytest.mark.parametrize("case", golden_cases("t5_bucket"), ids=lambda c: c.name)
def test_reference_and_implementation_match_the_bucket_rule(case) -> None:
    p = case.params
    expected = expected_buckets(case.inputs["relative_position"], p["bidirectional"],
                                p["num_buckets"], p["max_distance"])
    np.testing.assert_array_equal(case.output, expected)
    np.testing.assert_array_equal(np.asarray(implementation("t5_bucket", case)), expected)
