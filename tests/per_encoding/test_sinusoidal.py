"""sinusoidal: Vaswani et al.'s table in its three layouts (interleaved, concat, tensor2tensor)
against a broadcast NumPy float64 computation written here, a row by hand, and the padding row."""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc

from .mirror import golden_cases, implementation

EPS64 = float(np.finfo(np.float64).eps)


def expected_table(positions: np.ndarray, dim: int, base: float, layout: str,
                   padding_idx: int | None) -> np.ndarray:
    k = np.asarray(positions, dtype=np.float64)[..., None]
    if layout == "t2t":  # exp(-i ln(base) / (half - 1)), sin block then cos block, zero pad
        half = dim // 2
        w = np.exp(-np.arange(half) * math.log(base) / max(half - 1, 1))
        table = np.concatenate([np.sin(k * w), np.cos(k * w), np.zeros((*k.shape[:-1], dim % 2))],
                               axis=-1)
    else:
        w = np.power(base, -2.0 * np.arange((dim + 1) // 2) / dim)
        sin, cos = np.sin(k * w), np.cos(k * w)[..., :dim // 2]
        if layout == "concat":
            table = np.concatenate([sin, cos], axis=-1)
        else:  # column 2i sin, 2i + 1 cos
            table = np.zeros((*k.shape[:-1], dim))
            table[..., 0::2], table[..., 1::2] = sin, cos
    if padding_idx is not None:
        table = np.where(k == padding_idx, 0.0, table)
    return table


def test_position_one_by_hand() -> None:
    """d = 4, base 10000, position 1: [sin 1, cos 1, sin 0.01, cos 0.01]."""
    row = posenc.sinusoidal(np.array([1]), 4, dtype=np.float64)[0]
    np.testing.assert_allclose(row, [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)],
                               rtol=0, atol=1e-16)


@pytest.mark.parametrize("case", golden_cases("sinusoidal"), ids=lambda c: c.name)
def test_reference_and_implementation_match_the_broadcast_table(case) -> None:
    p = case.params
    expected = expected_table(case.inputs["positions"], p["dim"], p["base"], p["layout"],
                              p["padding_idx"])
    # an angle k * w is known to its last bits only: the error grows with the position
    atol = 8 * EPS64 * max(1.0, float(np.max(np.abs(case.inputs["positions"]), initial=0)))
    np.testing.assert_allclose(case.output, expected, rtol=0, atol=atol)
    np.testing.assert_allclose(np.asarray(implementation("sinusoidal", case)), expected, rtol=0,
                               atol=atol)


def test_interleaved_pairs_are_points_on_the_unit_circle() -> None:
    table = posenc.sinusoidal(np.arange(50), 10, dtype=np.float64)
    np.testing.assert_allclose(table[:, 0::2] ** 2 + table[:, 1::2] ** 2, 1.0, rtol=1e-15)
