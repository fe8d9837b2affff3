"""alibi_slopes: the head slopes of ALiBi (Press et al. 2022, section 3) against the closed form
2^(-max_bias h / n), the paper's numbers for 8 heads, and its rule for head counts that are not
powers of two, written out here (posenc's reference keeps exact fractions; this file does not)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc

from .mirror import golden_cases, implementation


def closed_form(num_heads: int, max_bias: float) -> np.ndarray:
    """Press et al.: a power of two n gives 2^(-max_bias h / n), h = 1..n; otherwise the
    slopes of the largest power of two below, then every other slope of twice that."""
    def geometric(n: int) -> np.ndarray:
        return np.exp2(-max_bias * np.arange(1, n + 1) / n)

    closest = 2 ** int(math.log2(num_heads))
    return np.concatenate([geometric(closest), geometric(2 * closest)[0::2][:num_heads - closest]])


def test_eight_heads_are_the_papers_halvings() -> None:
    """The paper: 'for 8 heads, the slopes are 1/2, 1/4, ..., 1/256'."""
    expected = [1 / 2 ** h for h in range(1, 9)]
    np.testing.assert_array_equal(posenc.alibi_slopes(8, dtype=np.float64), expected)


def test_twelve_heads_take_the_odd_powers_of_the_sixteen_head_sequence() -> None:
    """12 heads: 8 slopes 2^-1..2^-8, then 2^(-h/2) for h = 1, 3, 5, 7."""
    expected = [2.0 ** -h for h in range(1, 9)] + [2.0 ** (-h / 2) for h in (1, 3, 5, 7)]
    np.testing.assert_allclose(posenc.alibi_slopes(12, dtype=np.float64), expected, rtol=1e-15)


@pytest.mark.parametrize("case", golden_cases("alibi_slopes"), ids=lambda c: c.name)
def test_reference_and_implementation_match_the_closed_form(case) -> None:
    expected = closed_form(case.params["num_heads"], case.params["max_bias"])
    np.testing.assert_allclose(case.output, expected, rtol=4e-16, atol=0)
    np.testing.assert_allclose(np.asarray(implementation("alibi_slopes", case)), expected,
                               rtol=4e-16, atol=0)


@pytest.mark.parametrize("num_heads", [1, 3, 5, 6, 7, 20, 24, 64, 96])
def test_slopes_fall_strictly_within_zero_and_one(num_heads: int) -> None:
    slopes = posenc.alibi_slopes(num_heads, dtype=np.float64)
    assert slopes.shape == (num_heads,) and np.all((slopes > 0) & (slopes < 1))
    np.testing.assert_allclose(slopes, closed_form(num_heads, 8.0), rtol=4e-16)
