"""pixtral_rope: Pixtral's 2-D rope as transformers' PixtralRotaryEmbedding builds it (freqs =
base^(-2k/d); rows take freqs[::2], columns freqs[1::2], row frequencies first), written here
with outer products, flat ids row * max_width + column, and the row/column split by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc

from .mirror import golden_cases, implementation
from .test_rope import rotate

EPS64 = float(np.finfo(np.float64).eps)


def expected_pixtral(x, positions, base: float, max_width: int | None, layout: str) -> np.ndarray:
    positions = np.asarray(positions)
    if positions.ndim == 1:
        positions = np.stack(np.divmod(positions, max_width), axis=-1)
    d = x.shape[-1]
    freqs = np.power(base, -np.arange(0, d, 2) / d)
    angles = np.concatenate([np.outer(positions[:, 0], freqs[0::2]),
                             np.outer(positions[:, 1], freqs[1::2])], axis=-1)
    return rotate(x, angles, layout)


def test_rows_take_the_even_and_columns_the_odd_frequencies() -> None:
    """d = 8, base 100: frequencies 1, 100^-1/4, 100^-1/2, 100^-3/4; a token at (row 2, col 3)
    turns pairs 0, 1 by 2 and 2 * 100^-1/2, pairs 2, 3 by 3 * 100^-1/4 and 3 * 100^-3/4."""
    x = np.zeros((1, 8))
    x[0, :4] = 1.0  # half layout: pair j is (j, j + 4)
    out = posenc.pixtral_rope(x, np.array([[2, 3]]), base=100.0)
    angles = [2.0, 2 * 100 ** -0.5, 3 * 100 ** -0.25, 3 * 100 ** -0.75]
    np.testing.assert_allclose(out[0], [*map(math.cos, angles), *map(math.sin, angles)],
                               rtol=1e-15, atol=1e-16)


@pytest.mark.parametrize("case", golden_cases("pixtral_rope"), ids=lambda c: c.name)
def test_reference_and_implementation_match_the_outer_products(case) -> None:
    p = case.params
    x, positions = case.inputs["x"], case.inputs["positions"]
    expected = expected_pixtral(x, positions, p["base"], p["max_width"], p["layout"])
    atol = 16 * EPS64 * max(1.0, float(np.max(np.abs(positions)))) * float(np.max(np.abs(x)))
    np.testing.assert_allclose(case.output, expected, rtol=1e-13, atol=atol)
    np.testing.assert_allclose(np.asarray(implementation("pixtral_rope", case)), expected,
                               rtol=1e-13, atol=atol)
