"""alibi_bias: the three forms of ALiBi's bias against -m_h (i - j) built here by broadcasting
(queries at the last q_len of the k_len positions), Falcon's order as the bias over sqrt(d), and
a hand-written 2-head case."""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc

from .mirror import golden_cases, implementation
from .test_alibi_slopes import closed_form as slopes


def expected_bias(num_heads: int, q_len: int, k_len: int, form: str, max_bias: float,
                  head_dim: int | None) -> np.ndarray:
    m = slopes(num_heads, max_bias)[:, None, None]
    i = np.arange(k_len - q_len, k_len)[None, :, None]  # a query's absolute position
    j = np.arange(k_len)[None, None, :]
    if form == "key_only":
        bias = m * j
    elif form == "causal":
        bias = -m * (i - j)
    else:
        bias = -m * np.abs(i - j)
    return bias if head_dim is None else bias / math.sqrt(head_dim)


def test_two_heads_by_hand() -> None:
    """2 heads: slopes 2^-4 and 2^-8; query positions 1, 2 of 3 keys."""
    out = posenc.alibi_bias(2, 2, 3, dtype=np.float64)
    a, b = 1 / 16, 1 / 256
    expected = [[[-a, 0, a], [-2 * a, -a, 0]], [[-b, 0, b], [-2 * b, -b, 0]]]
    np.testing.assert_array_equal(out, expected)


def test_falcon_rw_divides_by_eight() -> None:
    """Falcon-RW-1B: 32 heads of width 64, the bias over sqrt(64) = 8 in the key-only form."""
    out = posenc.alibi_bias(32, 1, 4, form="key_only", head_dim=64, dtype=np.float64)
    np.testing.assert_allclose(out[0, 0], [0, 2 ** -0.25 / 8, 2 * 2 ** -0.25 / 8, 3 * 2 ** -0.25 / 8],
                               rtol=1e-15)


@pytest.mark.parametrize("case", golden_cases("alibi_bias"), ids=lambda c: c.name)
def test_reference_and_implementation_match_the_broadcast_formula(case) -> None:
    p = case.params
    expected = expected_bias(p["num_heads"], p["q_len"], p["k_len"], p["form"], p["max_bias"],
                             p["head_dim"])
    np.testing.assert_allclose(case.output, expected, rtol=1e-15, atol=0)
    np.testing.assert_allclose(np.asarray(implementation("alibi_bias", case)), expected,
                               rtol=1e-15, atol=0)
