"""TensorFlow's special cases for the core (``posenc.native`` plugin ``tensorflow``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

import tensorflow as tf

from posenc import native, rotary
from posenc.array_api import position_extrema


class TensorFlowNative(native.Native):
    library = "tensorflow"

    def array_types(self) -> tuple[type, ...]:
        return (tf.Tensor, tf.Variable)

    def namespace(self) -> ModuleType:
        from . import array_api

        return array_api

    def device_of(self, x: Any) -> Any:
        return None  # placement follows tf.device scopes, not the arrays

    def is_traced(self, x: Any) -> bool:
        return not tf.executing_eagerly()

    def position_extrema(self, positions: Any, floating: bool) -> Any | None:
        # eager: one graph call instead of three or four eager reductions
        if not tf.executing_eagerly():
            return None
        return _extrema_graph(positions.dtype.name, positions.shape.rank)(positions)

    # Eager calls: the phases (about thirty ops) run as one graph function, the frequencies
    # an argument, so one trace serves every schedule. Inside the user's tf.function this
    # gives None and the array-API code becomes part of their graph.
    def rotary_phases(self, positions: Any, inv_freq: tuple[float, ...], compute: Any,
                      device: Any) -> Any | None:
        if not tf.executing_eagerly():
            return None
        limbs = _limbs(inv_freq, tf.as_dtype(compute).name)
        graph = _phases_graph(positions.dtype.name, positions.shape.rank, limbs.dtype.name)
        return graph(positions, limbs)

    def rotate(self, head: Any, cos: Any, sin: Any, layout: str) -> Any | None:
        if (not tf.executing_eagerly() or cos.shape.rank != sin.shape.rank
                or not head.dtype == cos.dtype == sin.dtype):
            return None
        return _rotation(layout, head.dtype.name, head.shape.rank, cos.shape.rank)(head, cos, sin)


# The eager graph functions are concrete functions of fixed signatures (dtypes and ranks
# known, every length unknown): one trace each. They are called through
# ConcreteFunction._call_flat, TensorFlow's own call path (gradient tape included) minus the
# signature binding: a tf.function call spends about 0.4 ms matching its signature, more than
# the graph it picks. The phases (and integer extrema) are XLA-compiled: 43 us a call against
# 261 us in TensorFlow's graph executor (decode shapes, CPU), for one compilation per new
# positions shape. The rotation is not: XLA may contract a product and a sum into one FMA, in
# one rotary layout and not the other; the graph executor runs the eager kernels, with eager
# mode's roundings.
def _concrete(fn: Callable[..., Any], *signature: Any, xla: bool = False) -> Callable[..., Any]:
    graph = tf.function(fn, input_signature=list(signature), autograph=False,
                        jit_compile=xla).get_concrete_function()
    call_flat = getattr(graph, "_call_flat", None)
    if call_flat is None:  # a TensorFlow without it: the public call
        return graph
    captured = graph.captured_inputs
    return lambda *arrays: call_flat(list(arrays), captured)


def _spec(dtype: str, rank: int) -> Any:
    return tf.TensorSpec([None] * rank, dtype)


@functools.lru_cache(maxsize=64)
def _limbs(inv_freq: tuple[float, ...], compute: str) -> Any:
    with tf.init_scope():  # an eager constant even when first asked for inside a trace
        return tf.constant(rotary.turn_limbs(inv_freq), dtype=compute)


def _limb_phases(positions: Any, limbs: Any) -> Any:
    from . import array_api

    return rotary.limb_phases(array_api, positions, limbs)


@functools.lru_cache(maxsize=64)
def _phases_graph(dtype: str, rank: int, compute: str) -> Any:
    return _concrete(_limb_phases, _spec(dtype, rank), tf.TensorSpec([3, None], compute),
                     xla=True)


@functools.lru_cache(maxsize=64)
def _extrema_graph(dtype: str, rank: int) -> Any:
    from . import array_api

    floating = tf.as_dtype(dtype).is_floating
    # XLA for integers only: its min and max may drop a NaN, and the error names the NaN
    return _concrete(lambda p: position_extrema(array_api, p, floating), _spec(dtype, rank),
                     xla=not floating)


@functools.lru_cache(maxsize=64)
def _rotation(layout: str, dtype: str, rank: int, table_rank: int) -> Any:
    """The eager rotation, per layout, dtype and ranks (the widths are read at run time).
    Same operations and roundings as posenc.rotary.rotate."""

    def rotate(head: Any, cos: Any, sin: Any) -> Any:
        if layout == "half":
            half = tf.shape(head)[-1] // 2
            a, b = head[..., :half], head[..., half:]
            return (head * tf.concat([cos, cos], -1)
                    + tf.concat([-b, a], -1) * tf.concat([sin, sin], -1))
        a, b = head[..., 0::2], head[..., 1::2]
        return tf.reshape(tf.stack([a * cos - b * sin, b * cos + a * sin], -1), tf.shape(head))

    table = _spec(dtype, table_rank)
    return _concrete(rotate, _spec(dtype, rank), table, table)


NATIVE = native.register(TensorFlowNative())
