"""A thin array-API adapter over TensorFlow, covering what posenc's implementations use.

array-api-compat does not support TensorFlow, so this module maps the standard's names onto
``tf`` operations with the standard's semantics: explicit dtypes (no silent promotion),
``int64`` as the default integer, immutable results. It is a namespace, not a wrapper type:
inputs and outputs are plain ``tf.Tensor`` objects.
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

__array_api_version__ = "2023.12"

bool = tf.bool
int8, int16, int32, int64 = tf.int8, tf.int16, tf.int32, tf.int64
uint8, uint16, uint32, uint64 = tf.uint8, tf.uint16, tf.uint32, tf.uint64
float16, bfloat16, float32, float64 = tf.float16, tf.bfloat16, tf.float32, tf.float64
complex64, complex128 = tf.complex64, tf.complex128

_KINDS = {
    "bool": lambda d: d == tf.bool,
    "signed integer": lambda d: d.is_integer and not d.is_unsigned,
    "unsigned integer": lambda d: d.is_integer and d.is_unsigned,
    "integral": lambda d: d.is_integer,
    "real floating": lambda d: d.is_floating,
    "complex floating": lambda d: d.is_complex,
    "numeric": lambda d: d.is_integer or d.is_floating or d.is_complex,
}


def isdtype(dtype: tf.DType, kind: Any) -> Any:
    if isinstance(kind, tuple):
        return builtins.any(isdtype(dtype, k) for k in kind)  # `any` is the reduction here
    if isinstance(kind, str):
        if kind not in _KINDS:
            raise ValueError(f"isdtype: unknown kind {kind!r}")
        return _KINDS[kind](tf.as_dtype(dtype))
    return tf.as_dtype(dtype) == tf.as_dtype(kind)


def _on(device: Any) -> contextlib.AbstractContextManager[Any]:
    return tf.device(device) if device else contextlib.nullcontext()


def asarray(obj: Any, /, *, dtype: Any = None, device: Any = None, copy: Any = None) -> tf.Tensor:
    with _on(device):
        if isinstance(obj, tf.Tensor | tf.Variable):
            return obj if dtype is None else tf.cast(obj, dtype)
        host = np.asarray(obj)
        if host.dtype == np.float16 or host.dtype.kind in "fiubc" or host.dtype.name == "bfloat16":
            return tf.constant(host, dtype=dtype)
        raise TypeError(f"asarray: cannot convert {type(obj).__name__} of dtype {host.dtype}")


def astype(x: tf.Tensor, dtype: Any, /, *, copy: Any = True, device: Any = None) -> tf.Tensor:
    if x.dtype == dtype:  # tensors are immutable: the same one is as good as a copy
        return x
    return tf.cast(x, dtype)


def arange(start: Any, /, stop: Any = None, step: Any = 1, *, dtype: Any = None,
           device: Any = None) -> tf.Tensor:
    if stop is None:
        start, stop = 0, start
    with _on(device):
        return tf.range(start, stop, step, dtype=dtype or tf.int64)


def zeros(shape: Any, *, dtype: Any = None, device: Any = None) -> tf.Tensor:
    with _on(device):
        return tf.zeros(shape, dtype=dtype or tf.float64)


def zeros_like(x: tf.Tensor, /, *, dtype: Any = None, device: Any = None) -> tf.Tensor:
    return tf.zeros_like(x, dtype=dtype)


def ones_like(x: tf.Tensor, /, *, dtype: Any = None, device: Any = None) -> tf.Tensor:
    return tf.ones_like(x, dtype=dtype)


def full_like(x: tf.Tensor, /, fill_value: Any, *, dtype: Any = None,
              device: Any = None) -> tf.Tensor:
    return tf.fill(tf.shape(x), tf.constant(fill_value, dtype=dtype or x.dtype))


def full(shape: Any, fill_value: Any, *, dtype: Any = None, device: Any = None) -> tf.Tensor:
    with _on(device):
        return tf.fill(shape, tf.constant(fill_value, dtype=dtype))


def reshape(x: tf.Tensor, /, shape: Sequence[int | None], *, copy: Any = None) -> tf.Tensor:
    # Keras functional models trace with an unknown batch size: a shape built from another
    # tensor's .shape then holds None, which is the one dimension tf.reshape can infer
    if [s is None for s in shape].count(True) == 1:  # (this module's sum is the array API's)
        shape = [-1 if s is None else s for s in shape]
    return tf.reshape(x, shape)


def expand_dims(x: tf.Tensor, /, *, axis: int = 0) -> tf.Tensor:
    return tf.expand_dims(x, axis)


def broadcast_to(x: tf.Tensor, /, shape: Sequence[int]) -> tf.Tensor:
    return tf.broadcast_to(x, shape)


def concat(arrays: Sequence[tf.Tensor], /, *, axis: int | None = 0) -> tf.Tensor:
    if axis is None:
        return tf.concat([tf.reshape(a, [-1]) for a in arrays], 0)
    return tf.concat(list(arrays), axis)


def stack(arrays: Sequence[tf.Tensor], /, *, axis: int = 0) -> tf.Tensor:
    return tf.stack(list(arrays), axis)


def take(x: tf.Tensor, indices: tf.Tensor, /, *, axis: int | None = None) -> tf.Tensor:
    if axis is None:
        x, axis = tf.reshape(x, [-1]), 0
    return tf.gather(x, indices, axis=axis)


def _like(value: Any, other: tf.Tensor) -> tf.Tensor:
    return value if isinstance(value, tf.Tensor) else tf.constant(value, dtype=other.dtype)


def clip(x: tf.Tensor, /, min: Any = None, max: Any = None) -> tf.Tensor:
    if min is not None:
        x = tf.maximum(x, _like(min, x))
    if max is not None:
        x = tf.minimum(x, _like(max, x))
    return x


def where(condition: tf.Tensor, x1: Any, x2: Any, /) -> tf.Tensor:
    if not isinstance(x1, tf.Tensor):
        x1 = _like(x1, x2)
    if not isinstance(x2, tf.Tensor):
        x2 = _like(x2, x1)
    return tf.where(condition, x1, x2)


def _reduction(op: Any) -> Any:
    def reduce(x: tf.Tensor, /, *, axis: Any = None, keepdims: bool = False) -> tf.Tensor:
        return op(x, axis=axis, keepdims=keepdims)

    return reduce


min = _reduction(tf.reduce_min)
max = _reduction(tf.reduce_max)
sum = _reduction(tf.reduce_sum)
prod = _reduction(tf.reduce_prod)
any = _reduction(tf.reduce_any)
all = _reduction(tf.reduce_all)


def _unary(op: Any) -> Any:
    def apply(x: tf.Tensor, /) -> tf.Tensor:
        return op(x)

    apply.__name__ = op.__name__
    return apply


sin, cos, tan = _unary(tf.math.sin), _unary(tf.math.cos), _unary(tf.math.tan)
exp, log, sqrt = _unary(tf.math.exp), _unary(tf.math.log), _unary(tf.math.sqrt)
abs, sign, floor, ceil = (
    _unary(tf.math.abs), _unary(tf.math.sign), _unary(tf.math.floor), _unary(tf.math.ceil))
isnan, isfinite = _unary(tf.math.is_nan), _unary(tf.math.is_finite)


def pow(x1: Any, x2: Any, /) -> tf.Tensor:
    return tf.pow(x1, x2)


def matmul(x1: tf.Tensor, x2: tf.Tensor, /) -> tf.Tensor:
    return tf.linalg.matmul(x1, x2)


def matrix_transpose(x: tf.Tensor, /) -> tf.Tensor:
    return tf.linalg.matrix_transpose(x)


def real(x: tf.Tensor, /) -> tf.Tensor:
    return tf.math.real(x)


def imag(x: tf.Tensor, /) -> tf.Tensor:
    return tf.math.imag(x)


def conj(x: tf.Tensor, /) -> tf.Tensor:
    return tf.math.conj(x)


def cumulative_sum(x: tf.Tensor, /, *, axis: int | None = None, dtype: Any = None,
                   include_initial: bool = False) -> tf.Tensor:
    if axis is None:
        x, axis = tf.reshape(x, [-1]), 0
    out = tf.math.cumsum(x if dtype is None else tf.cast(x, dtype), axis=axis)
    if include_initial:
        pad = [[0, 0]] * len(out.shape)
        pad[axis] = [1, 0]
        out = tf.pad(out, pad)
    return out


class _Info:
    def __init__(self, info: Any) -> None:
        self.bits, self.max, self.min = info.bits, info.max, info.min
        self.eps = getattr(info, "eps", None)
        self.dtype = info.dtype


def finfo(type: Any, /) -> _Info:
    import ml_dtypes

    dtype = tf.as_dtype(getattr(type, "dtype", type))
    return _Info(ml_dtypes.finfo(dtype.as_numpy_dtype))


def iinfo(type: Any, /) -> _Info:
    dtype = tf.as_dtype(getattr(type, "dtype", type))
    return _Info(np.iinfo(dtype.as_numpy_dtype))


# -- used by the relative encodings (gathers along an axis, bucketing, elementwise helpers) ---
def take_along_axis(x: tf.Tensor, indices: tf.Tensor, /, *, axis: int = -1) -> tf.Tensor:
    rank = len(x.shape)
    axis = axis % rank
    batch = tf.broadcast_dynamic_shape(tf.shape(x)[:axis], tf.shape(indices)[:axis])
    if axis != rank - 1:  # move the gathered axis last, gather, move it back
        perm = [*range(axis), *range(axis + 1, rank), axis]
        inverse = [*range(axis), rank - 1, *range(axis, rank - 1)]
        x, indices = tf.transpose(x, perm), tf.transpose(indices, perm)
    lead_x = tf.concat([batch, tf.shape(x)[axis:-1]], 0)
    lead_i = tf.concat([batch, tf.shape(indices)[axis:-1]], 0)
    lead = tf.broadcast_dynamic_shape(lead_x, lead_i)
    x = tf.broadcast_to(x, tf.concat([lead, tf.shape(x)[-1:]], 0))
    indices = tf.broadcast_to(indices, tf.concat([lead, tf.shape(indices)[-1:]], 0))
    out = tf.gather(x, indices, batch_dims=rank - 1)
    return out if axis == rank - 1 else tf.transpose(out, inverse)


def searchsorted(x1: tf.Tensor, x2: tf.Tensor, /, *, side: str = "left",
                 sorter: Any = None) -> tf.Tensor:
    if sorter is not None:
        x1 = tf.gather(x1, sorter)
    flat = tf.reshape(x2, [1, -1])
    out = tf.searchsorted(x1[None, :], flat, side=side, out_type=tf.int64)
    return tf.reshape(out, tf.shape(x2))


def _binary(op: Any) -> Any:
    def apply(x1: Any, x2: Any, /) -> tf.Tensor:
        if not isinstance(x1, tf.Tensor):
            x1 = _like(x1, x2)
        if not isinstance(x2, tf.Tensor):
            x2 = _like(x2, x1)
        return op(x1, x2)

    apply.__name__ = op.__name__
    return apply


minimum, maximum = _binary(tf.math.minimum), _binary(tf.math.maximum)
floor_divide, remainder = _binary(tf.math.floordiv), _binary(tf.math.floormod)
logical_and, logical_or = _binary(tf.math.logical_and), _binary(tf.math.logical_or)
logical_not = _unary(tf.math.logical_not)
log1p, expm1, tanh = _unary(tf.math.log1p), _unary(tf.math.expm1), _unary(tf.math.tanh)
square, round = _unary(tf.math.square), _unary(tf.math.round)  # round: half to even


def squeeze(x: tf.Tensor, /, axis: int | tuple[int, ...]) -> tf.Tensor:
    return tf.squeeze(x, axis=axis)


def flip(x: tf.Tensor, /, *, axis: int | tuple[int, ...] | None = None) -> tf.Tensor:
    axes = list(range(len(x.shape))) if axis is None else (
        [axis] if isinstance(axis, int) else list(axis))
    return tf.reverse(x, axes)


def permute_dims(x: tf.Tensor, /, axes: tuple[int, ...]) -> tf.Tensor:
    return tf.transpose(x, axes)


def tile(x: tf.Tensor, repetitions: tuple[int, ...], /) -> tf.Tensor:
    reps = list(repetitions)
    rank = len(x.shape)
    if len(reps) < rank:
        reps = [1] * (rank - len(reps)) + reps
    elif len(reps) > rank:
        x = tf.reshape(x, [1] * (len(reps) - rank) + list(x.shape))
    return tf.tile(x, reps)
