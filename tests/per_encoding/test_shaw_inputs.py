"""shaw_scores / shaw_attention argument checks on every backend: bad shapes, dtypes and
parameters, and the empty and zero-width edge cases."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.errors import ParameterError

Q = np.zeros((2, 3, 4))
K = np.zeros((2, 5, 4))
V = np.zeros((2, 5, 6))
TK = np.zeros((5, 4))  # K = 2
TV = np.zeros((5, 6))


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((Q, K, np.zeros((4, 4))), {}, r"table_k has shape \(4, 4\), expected 5 rows "
                                       r"\(2\*max_relative_position \+ 1 for "
                                       r"max_relative_position=2\)"),
        ((Q, K, np.zeros((5, 3))), {}, r"table_k has shape \(5, 3\), expected width 4 \(the last "
                                       r"dim of q and k\)"),
        ((Q, K, np.zeros((2, 5, 4))), {}, r"table_k must have shape \[2\*max_relative_position "
                                          r"\+ 1, d\], got shape \(2, 5, 4\)"),
        ((K, Q, TK), {}, r"q has q_len=5 > k_len=3: queries are aligned to the end of the keys"),
        ((Q, K[..., :3], TK), {}, r"q and k must have the same last dim, got shapes \(2, 3, 4\) "
                                  r"and \(2, 5, 3\)"),
        ((Q, np.zeros((3, 5, 4)), TK), {}, r"batch dims do not broadcast: q \(2,\), k \(3,\)"),
        ((Q[0, 0], K, TK), {}, r"q must have at least 2 dims"),
        ((Q.astype(int), K, TK), {}, r"q must have a real floating dtype, got int(32|64)"),
        ((Q, K, TK), {"max_relative_position": -1}, r"max_relative_position=-1 must be >= 0"),
        ((Q, K, TK), {"max_relative_position": True}, r"max_relative_position must be an int, "
                                                      r"got True \(bool\)"),
        ((Q, K, TK), {"max_relative_position": 2.0}, r"max_relative_position must be an int, "
                                                     r"got 2.0 \(float\)"),
        ((Q, K, TK), {"scale": 0.0}, r"scale=0.0 must be a finite number > 0"),
        ((Q, K, TK), {"scale": -1.0}, r"scale=-1.0 must be a finite number > 0"),
        ((Q, K, TK), {"scale": float("inf")}, r"scale=inf must be a finite number > 0"),
    ],
)
def test_bad_scores_inputs(pe, args, kwargs, message) -> None:
    kwargs = {"max_relative_position": 2, **kwargs}
    with pytest.raises(ParameterError, match=message):
        pe.shaw_scores(*args, **kwargs)


def test_mixed_dtypes() -> None:
    """(NumPy only: the JAX backend converts float64 inputs to float32 without x64.)"""
    import posenc

    with pytest.raises(ParameterError, match=r"q, k, table_k must share one dtype, got q "
                                             r"float64, k float64, table_k float32"):
        posenc.shaw_scores(Q, K, TK.astype(np.float32), max_relative_position=2)
    with pytest.raises(ParameterError, match=r"q, k, v, table_k, table_v must share one dtype, "
                                             r"got q float32, k float32, v float32, table_k "
                                             r"float32, table_v float64"):
        posenc.shaw_attention(*(a.astype(np.float32) for a in (Q, K, V, TK)), TV,
                              max_relative_position=2)


def test_max_relative_position_is_required(pe) -> None:
    with pytest.raises(TypeError, match="max_relative_position"):
        pe.shaw_scores(Q, K, TK)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((Q, K, V, TK, np.zeros((5, 4))), {}, r"table_v has shape \(5, 4\), expected width 6 "
                                              r"\(the last dim of v\)"),
        ((Q, K, V, TK, np.zeros((7, 6))), {}, r"table_v has shape \(7, 6\), expected 5 rows "
                                              r"\(2\*max_relative_position \+ 1 for "
                                              r"max_relative_position=2\)"),
        ((Q, K, V, np.zeros((3, 4)), TV), {}, r"table_k has shape \(3, 4\), expected 5 rows"),
        ((Q, K, V[:, :4], TK, TV), {}, r"k and v must have the same length \(axis -2\), got "
                                       r"shapes \(2, 5, 4\) and \(2, 4, 6\)"),
        ((K, Q, Q, TK), {}, r"q has q_len=5 > k_len=3"),
        ((Q, K, V, TK, TV), {"mask": np.ones((3, 5))}, r"mask must be boolean \(True = may "
                                                       r"attend\), got dtype float(32|64)"),
        ((Q, K, V, TK, TV), {"mask": np.ones((3, 4), bool)}, r"mask has shape \(3, 4\), which "
                                                             r"does not broadcast to the scores' "
                                                             r"shape \(2, 3, 5\)"),
        ((Q, K, V, TK), {"max_relative_position": -2}, r"max_relative_position=-2 must be >= 0"),
        ((Q, K, V, TK), {"scale": 0}, r"scale=0 must be a finite number > 0"),
    ],
)
def test_bad_attention_inputs(pe, args, kwargs, message) -> None:
    kwargs = {"max_relative_position": 2, **kwargs}
    with pytest.raises(ParameterError, match=message):
        pe.shaw_attention(*args, **kwargs)


def test_no_keys_give_an_empty_result(pe) -> None:
    """k_len = 0 (hence q_len = 0, queries sit at the end of the keys): an empty
    [..., 0, d_v] result in q's dtype, with the value term and a mask too."""
    from posenc.backends import get_backend

    backend = get_backend(pe.__name__.rsplit(".", 1)[-1])
    q, k, v = (np.ones(shape, np.float32) for shape in ((2, 0, 4), (2, 0, 4), (2, 0, 6)))
    tk, tv = TK.astype(np.float32), TV.astype(np.float32)
    for kwargs in ({}, {"mask": np.ones((0, 0), bool)}):
        for table_v in (None, tv):
            out = pe.shaw_attention(q, k, v, tk, table_v, max_relative_position=2, **kwargs)
            assert "float32" in str(out.dtype)
            assert backend.to_numpy(out).shape == (2, 0, 6)
    assert backend.to_numpy(pe.shaw_scores(q, k, tk, max_relative_position=2)).shape == (2, 0, 0)


def test_zero_width_queries_need_an_explicit_scale(pe) -> None:
    from posenc.backends import get_backend

    backend = get_backend(pe.__name__.rsplit(".", 1)[-1])
    q, k, v = np.ones((3, 0)), np.ones((3, 0)), np.arange(15.0).reshape(3, 5)
    with pytest.raises(ParameterError, match=r"q has shape \(3, 0\): its last dim d = 0 has no "
                                             r"default scale"):
        pe.shaw_scores(q, k, np.ones((5, 0)), max_relative_position=2)
    with pytest.raises(ParameterError, match=r"q has shape \(3, 0\)"):
        pe.shaw_attention(q, k, v, np.ones((5, 0)), max_relative_position=2)
    # scores all 0: every query averages the values (by hand: the mean of v's rows)
    out = pe.shaw_attention(q, k, v, np.ones((5, 0)), max_relative_position=2, scale=1.0)
    np.testing.assert_allclose(backend.to_numpy(out), np.broadcast_to(v.mean(axis=0), (3, 5)))
