"""TensorFlow's special cases for the core (``posenc.native`` plugin ``tensorflow``)."""

from __future__ import annotations

import functools
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
        return _position_extrema(positions) if tf.executing_eagerly() else None

    # Eager calls: the phases (about thirty ops) run as one graph function, the frequencies
    # an argument, so a trace or two (the shapes generalise) serve every schedule. Inside the
    # user's tf.function this gives None and the array-API code becomes part of their graph.
    def rotary_phases(self, positions: Any, inv_freq: tuple[float, ...], compute: Any,
                      device: Any) -> Any | None:
        if not tf.executing_eagerly():
            return None
        return _limb_phases(positions, _limbs(inv_freq, tf.as_dtype(compute).name))


@functools.lru_cache(maxsize=64)
def _limbs(inv_freq: tuple[float, ...], compute: str) -> Any:
    with tf.init_scope():  # an eager constant even when first asked for inside a trace
        return tf.constant(rotary.turn_limbs(inv_freq), dtype=compute)


@tf.function(reduce_retracing=True, autograph=False)
def _limb_phases(positions: Any, limbs: Any) -> Any:
    from . import array_api

    return rotary.limb_phases(array_api, positions, limbs)


@tf.function(reduce_retracing=True, autograph=False)
def _position_extrema(positions: Any) -> Any:
    from . import array_api

    floating = positions.dtype.is_floating
    return position_extrema(array_api, positions, floating)


NATIVE = native.register(TensorFlowNative())
