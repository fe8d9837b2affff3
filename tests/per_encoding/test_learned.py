"""learned: the lookup of a trained table, row p for position p, against NumPy indexing written
here (BERT's positions, RoBERTa's offset of 2, left padding), and what happens out of range."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from posenc.errors import PositionOutOfRangeError

from .mirror import golden_cases, implementation

TABLE = np.arange(24, dtype=np.float64).reshape(6, 4) / 10  # row p holds 0.4p .. 0.4p + 0.3


def test_row_p_by_hand() -> None:
    out = posenc.learned(np.array([[0, 5], [2, 2]]), TABLE)
    np.testing.assert_array_equal(out[0, 1], [2.0, 2.1, 2.2, 2.3])
    np.testing.assert_array_equal(out[1, 0], out[1, 1])
    assert out.shape == (2, 2, 4) and out.dtype == np.float64


@pytest.mark.parametrize("case", golden_cases("learned"), ids=lambda c: c.name)
def test_reference_and_implementation_index_the_table(case) -> None:
    positions, table = case.inputs["positions"], case.inputs["table"]
    if case.params["out_of_range"] == "clip":
        positions = np.clip(positions, 0, table.shape[0] - 1)
    expected = np.take(table, positions, axis=0)
    np.testing.assert_array_equal(case.output, expected)
    np.testing.assert_array_equal(np.asarray(implementation("learned", case)), expected)


@pytest.mark.parametrize("position", [6, -1])
def test_out_of_range_raises_and_clip_clamps_without_wrapping(position: int) -> None:
    with pytest.raises(PositionOutOfRangeError, match=str(position)):
        posenc.learned(np.array([0, position]), TABLE)
    clipped = posenc.learned(np.array([position]), TABLE, out_of_range="clip")[0]
    np.testing.assert_array_equal(clipped, TABLE[5 if position > 0 else 0])
