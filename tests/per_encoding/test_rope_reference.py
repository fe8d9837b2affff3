"""The NumPy rope reference refuses positions that do not give one position per row of x."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posenc import ParameterError
from posenc.reference.rope import rope

PLAIN = dict(base=10000.0, layout="half", rotary_dim=None, scaling=None, seq_len=None)


@pytest.mark.parametrize(("x_shape", "positions", "length", "seq"), [
    ((2, 6, 8), np.arange(5), 5, 6),  # too short: used to fail with an IndexError
    ((2, 6, 8), np.arange(7), 7, 6),  # too long: used to be cut silently to the first 6
    ((2, 6, 8), np.zeros((3, 6), dtype=np.int64), 6, 6),  # batch 3 against x's batch 2
    ((6, 8), np.zeros((1, 6), dtype=np.int64), 6, 6),  # batched positions, unbatched x
    ((1, 6, 8), np.zeros((1, 4), dtype=np.int64), 4, 6),
])
def test_rope_reference_refuses_positions_of_another_length(
        x_shape: tuple[int, ...], positions: np.ndarray, length: int, seq: int) -> None:
    with pytest.raises(ParameterError, match=rf"positions has length {length} .* seq = {seq}"):
        rope(np.ones(x_shape), positions, **PLAIN)


def test_rope_reference_rotates_rows_by_their_own_positions() -> None:
    """[seq] and [batch, seq] positions of the right length: row s of batch b turns by
    positions[b, s]·θ_i (half layout, dim 4: θ = 1, 1/100)."""
    x = np.arange(1.0, 1 + 2 * 3 * 4).reshape(2, 3, 4)
    positions = np.array([[0, 5, 9], [2, 3, 7]])
    out = rope(x, positions, **PLAIN)
    for b in range(2):
        for s in range(3):
            for i, theta in enumerate((1.0, 0.01)):
                c, sn = math.cos(positions[b, s] * theta), math.sin(positions[b, s] * theta)
                a, z = x[b, s, i], x[b, s, i + 2]
                assert out[b, s, i] == pytest.approx(a * c - z * sn, abs=1e-12)
                assert out[b, s, i + 2] == pytest.approx(z * c + a * sn, abs=1e-12)
    assert np.array_equal(rope(x, positions[0], **PLAIN)[1], rope(x[1], positions[0], **PLAIN))
