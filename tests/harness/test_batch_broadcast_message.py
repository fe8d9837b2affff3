"""The batch-broadcast error says which batch dim clashes in words that cannot be read as the
feature axis (it said 'axis -1', which reads as the last axis of the tensors)."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from posenc.errors import ParameterError


def test_the_clashing_batch_dim_is_named_unambiguously() -> None:
    q, k, v = np.zeros((2, 5, 4)), np.zeros((3, 5, 4)), np.zeros((3, 5, 4))
    with pytest.raises(ParameterError) as info:
        posenc.attention(q, k, v)
    text = str(info.value)
    assert text.startswith("batch dims do not broadcast: q (2,), k (3,), v (3,)")
    assert "axis -1" not in text
    assert "the last batch dim differs (q 2 vs k 3 vs v 3" in text


def test_an_inner_clash_names_its_place_from_the_end() -> None:
    q, k = np.zeros((2, 4, 5, 4)), np.zeros((3, 4, 5, 4))
    with pytest.raises(ParameterError, match=r"the second-to-last batch dim differs \(q 2 vs k 3"):
        posenc.attention(q, k, k)
