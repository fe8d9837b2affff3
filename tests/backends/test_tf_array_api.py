"""The TensorFlow array-API adapter agrees with NumPy's standard semantics, function by function."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")  # import torch before TensorFlow (the other order has crashed)
tf = pytest.importorskip("tensorflow")
from posenc.backends.tensorflow import array_api as xp  # noqa: E402

A = np.array([[-1.5, 0.25, 2.0], [3.0, -0.5, 1.0]])


def t(a, dtype=None):
    return xp.asarray(a, dtype=dtype)


def test_dtypes_and_isdtype() -> None:
    assert xp.isdtype(xp.float32, "real floating") and xp.isdtype(xp.bfloat16, "real floating")
    assert xp.isdtype(xp.int64, "integral") and xp.isdtype(xp.int32, "signed integer")
    assert xp.isdtype(xp.uint8, "unsigned integer") and not xp.isdtype(xp.uint8, "signed integer")
    assert xp.isdtype(xp.bool, "bool") and not xp.isdtype(xp.bool, "numeric")
    assert xp.isdtype(xp.complex64, ("complex floating", "integral"))
    assert xp.isdtype(xp.float64, xp.float64) and not xp.isdtype(xp.float64, xp.float32)
    with pytest.raises(ValueError, match="unknown kind 'reals'"):
        xp.isdtype(xp.float32, "reals")
    assert xp.finfo(xp.bfloat16).bits == 16 and xp.iinfo(xp.int32).max == 2**31 - 1


def test_creation() -> None:
    assert t([1, 2]).dtype == xp.int64 and t(A).dtype == xp.float64
    assert t(A, xp.float32).dtype == xp.float32
    np.testing.assert_array_equal(xp.arange(5).numpy(), np.arange(5))
    np.testing.assert_array_equal(xp.arange(2, 9, 3).numpy(), np.arange(2, 9, 3))
    assert xp.arange(3).dtype == xp.int64
    np.testing.assert_array_equal(xp.zeros((2, 3)).numpy(), np.zeros((2, 3)))
    np.testing.assert_array_equal(xp.zeros_like(t(A)).numpy(), np.zeros_like(A))
    np.testing.assert_array_equal(xp.ones_like(t(A)).numpy(), np.ones_like(A))
    np.testing.assert_array_equal(xp.full((2,), 7.0, dtype=xp.float32).numpy(), [7.0, 7.0])
    np.testing.assert_array_equal(xp.full_like(t([1, 2]), 5).numpy(), [5, 5])
    with pytest.raises(TypeError, match="cannot convert"):
        xp.asarray(np.array(["a"]))


def test_shape_functions() -> None:
    a = t(A)
    np.testing.assert_array_equal(xp.reshape(a, (3, 2)).numpy(), A.reshape(3, 2))
    np.testing.assert_array_equal(xp.expand_dims(a, axis=1).numpy(), A[:, None])
    np.testing.assert_array_equal(xp.broadcast_to(t([1.0, 2.0, 3.0]), (2, 3)).numpy(),
                                  np.broadcast_to([1.0, 2.0, 3.0], (2, 3)))
    np.testing.assert_array_equal(xp.concat([a, a], axis=1).numpy(), np.concatenate([A, A], 1))
    np.testing.assert_array_equal(xp.concat([a, a], axis=None).numpy(),
                                  np.concatenate([A.ravel(), A.ravel()]))
    np.testing.assert_array_equal(xp.stack([a, a], axis=-1).numpy(), np.stack([A, A], -1))
    np.testing.assert_array_equal(xp.take(a, t([1, 0, 1]), axis=0).numpy(), A[[1, 0, 1]])
    np.testing.assert_array_equal(xp.take(a, t([5, 0])).numpy(), A.ravel()[[5, 0]])


def test_elementwise_and_reductions() -> None:
    a = t(A)
    for name in ("sin", "cos", "tan", "exp", "abs", "sign", "floor", "ceil", "isnan", "isfinite"):
        np.testing.assert_allclose(getattr(xp, name)(a).numpy(), getattr(np, name)(A),
                                   rtol=1e-15, err_msg=name)
    pos = np.abs(A) + 1
    for name in ("log", "sqrt"):
        np.testing.assert_allclose(getattr(xp, name)(t(pos)).numpy(), getattr(np, name)(pos),
                                   rtol=1e-15)
    np.testing.assert_allclose(xp.pow(t(pos), t(pos)).numpy(), np.power(pos, pos), rtol=1e-14)
    np.testing.assert_array_equal(xp.clip(a, -1.0, 1.0).numpy(), np.clip(A, -1.0, 1.0))
    np.testing.assert_array_equal(xp.clip(a, max=0.0).numpy(), np.minimum(A, 0.0))
    np.testing.assert_array_equal(xp.where(a > 0, a, 0.0).numpy(), np.where(A > 0, A, 0.0))
    np.testing.assert_array_equal(xp.where(a > 0, 1.0, a).numpy(), np.where(A > 0, 1.0, A))
    for name, ref in (("min", np.min), ("max", np.max), ("sum", np.sum), ("prod", np.prod)):
        fn = getattr(xp, name)
        np.testing.assert_allclose(fn(a).numpy(), ref(A), err_msg=name)
        np.testing.assert_allclose(fn(a, axis=1, keepdims=True).numpy(),
                                   ref(A, axis=1, keepdims=True), err_msg=name)
    assert bool(xp.any(a > 2.5)) and not bool(xp.all(a > 0))
    np.testing.assert_allclose(xp.matmul(a, xp.reshape(a, (3, 2))).numpy(), A @ A.reshape(3, 2))
    np.testing.assert_array_equal(xp.cumulative_sum(a, axis=1).numpy(), np.cumsum(A, axis=1))
    np.testing.assert_array_equal(xp.cumulative_sum(a, axis=0, include_initial=True).numpy(),
                                  np.concatenate([np.zeros((1, 3)), np.cumsum(A, axis=0)]))
    assert xp.astype(a, xp.bfloat16).dtype == xp.bfloat16


def test_linear_algebra_and_complex() -> None:
    a = t(A)
    np.testing.assert_array_equal(xp.matrix_transpose(a).numpy(), A.T)
    batched = np.stack([A, 2 * A])
    np.testing.assert_array_equal(xp.matrix_transpose(t(batched)).numpy(),
                                  np.swapaxes(batched, -1, -2))
    c = A + 1j * A[:, ::-1]
    z = xp.astype(a, xp.complex128) + xp.astype(t(A[:, ::-1].copy()), xp.complex128) * xp.asarray(
        1j, dtype=xp.complex128)
    np.testing.assert_array_equal(z.numpy(), c)
    assert xp.asarray(1j, dtype=xp.complex64).dtype == xp.complex64
    np.testing.assert_array_equal(xp.real(z).numpy(), c.real)
    np.testing.assert_array_equal(xp.imag(z).numpy(), c.imag)
    np.testing.assert_array_equal(xp.conj(z).numpy(), np.conj(c))
    np.testing.assert_array_equal(xp.abs(z).numpy(), np.abs(c))


def test_gathers_and_bucketing() -> None:
    rng = np.random.default_rng(0)
    a = rng.normal(size=(2, 3, 5))
    idx = rng.integers(0, 5, size=(2, 3, 4))
    np.testing.assert_array_equal(xp.take_along_axis(t(a), t(idx), axis=-1).numpy(),
                                  np.take_along_axis(a, idx, axis=-1))
    idx1 = rng.integers(0, 3, size=(2, 6, 5))
    np.testing.assert_array_equal(xp.take_along_axis(t(a), t(idx1), axis=1).numpy(),
                                  np.take_along_axis(a, idx1, axis=1))
    # broadcasting leading dims, as the standard (2024.12) allows
    idx2 = rng.integers(0, 5, size=(1, 3, 7))
    np.testing.assert_array_equal(xp.take_along_axis(t(a), t(idx2), axis=-1).numpy(),
                                  np.take_along_axis(a, np.broadcast_to(idx2, (2, 3, 7)), -1))
    edges = np.array([1.0, 2.0, 2.0, 5.0])
    values = np.array([[0.0, 1.0, 2.0], [3.0, 5.0, 9.0]])
    for side in ("left", "right"):
        got = xp.searchsorted(t(edges), t(values), side=side)
        assert got.dtype == xp.int64
        np.testing.assert_array_equal(got.numpy(), np.searchsorted(edges, values, side=side))


def test_more_elementwise() -> None:
    a, b = t(A), t(A[::-1].copy())
    np.testing.assert_array_equal(xp.minimum(a, b).numpy(), np.minimum(A, A[::-1]))
    np.testing.assert_array_equal(xp.maximum(a, 0.0).numpy(), np.maximum(A, 0.0))
    i, j = t([-7, 7, 5]), t([2, 2, -3])
    np.testing.assert_array_equal(xp.floor_divide(i, j).numpy(), np.floor_divide([-7, 7, 5],
                                                                                  [2, 2, -3]))
    np.testing.assert_array_equal(xp.remainder(i, j).numpy(), np.remainder([-7, 7, 5], [2, 2, -3]))
    p, q = t([True, False, True]), t([True, True, False])
    np.testing.assert_array_equal(xp.logical_and(p, q).numpy(), [True, False, False])
    np.testing.assert_array_equal(xp.logical_or(p, q).numpy(), [True, True, True])
    np.testing.assert_array_equal(xp.logical_not(p).numpy(), [False, True, False])
    pos = np.abs(A)
    np.testing.assert_allclose(xp.log1p(t(pos)).numpy(), np.log1p(pos), rtol=1e-15)
    np.testing.assert_allclose(xp.expm1(a).numpy(), np.expm1(A), rtol=1e-15)
    np.testing.assert_allclose(xp.tanh(a).numpy(), np.tanh(A), rtol=1e-15)
    np.testing.assert_array_equal(xp.square(a).numpy(), A**2)
    np.testing.assert_array_equal(xp.round(t([0.5, 1.5, -2.5])).numpy(), [0.0, 2.0, -2.0])
    np.testing.assert_array_equal(xp.squeeze(t(A[None]), axis=0).numpy(), A)
    np.testing.assert_array_equal(xp.flip(a, axis=1).numpy(), A[:, ::-1])
    np.testing.assert_array_equal(xp.flip(a).numpy(), A[::-1, ::-1])
    np.testing.assert_array_equal(xp.permute_dims(a, (1, 0)).numpy(), A.T)
    np.testing.assert_array_equal(xp.tile(a, (2, 1)).numpy(), np.tile(A, (2, 1)))
    np.testing.assert_array_equal(xp.tile(t([1, 2]), (2, 2)).numpy(), np.tile([1, 2], (2, 2)))
