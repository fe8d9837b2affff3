"""llama4_vision_rope: Llama 4's vision rope (1-based patch coordinates; the first d/4 pairs turn
by (column + 1) base^(-4j/d), the next d/4 by (row + 1) at the same frequencies; the CLS token,
with negative coordinates, is not turned), written here with broadcasting, and a hand case."""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc

from .mirror import golden_cases, implementation
from .test_rope import rotate

EPS64 = float(np.finfo(np.float64).eps)


def expected_llama4(x, positions, base: float, layout: str) -> np.ndarray:
    positions = np.asarray(positions)
    d = x.shape[-1]
    ladder = np.power(base, -4.0 * np.arange(d // 4) / d)
    row, col = positions[:, :1] + 1, positions[:, 1:] + 1
    angles = np.concatenate([col * ladder, row * ladder], axis=-1)
    angles = np.where(np.any(positions < 0, axis=-1, keepdims=True), 0.0, angles)
    return rotate(x, angles, layout)


def test_column_then_row_by_hand() -> None:
    """d = 4, interleaved: pair 0 turns by column + 1, pair 1 by row + 1 (frequency 1 each);
    the CLS token at (-1, -1) stays."""
    x = np.array([[1.0, 0.0, 1.0, 0.0], [1.0, 0.0, 1.0, 0.0]])
    out = posenc.llama4_vision_rope(x, np.array([[-1, -1], [1, 2]]))
    np.testing.assert_array_equal(out[0], x[0])
    np.testing.assert_allclose(out[1], [math.cos(3), math.sin(3), math.cos(2), math.sin(2)],
                               rtol=1e-15, atol=1e-16)


@pytest.mark.parametrize("case", golden_cases("llama4_vision_rope"), ids=lambda c: c.name)
def test_reference_and_implementation_match_the_broadcast_angles(case) -> None:
    p = case.params
    x, positions = case.inputs["x"], case.inputs["positions"]
    expected = expected_llama4(x, positions, p["base"], p["layout"])
    atol = 16 * EPS64 * (1 + float(np.max(np.abs(positions)))) * float(np.max(np.abs(x)))
    np.testing.assert_allclose(case.output, expected, rtol=1e-13, atol=atol)
    np.testing.assert_allclose(np.asarray(implementation("llama4_vision_rope", case)), expected,
                               rtol=1e-13, atol=atol)
