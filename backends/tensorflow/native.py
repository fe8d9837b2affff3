"""TensorFlow's special cases for the core (``posenc.native`` plugin ``tensorflow``)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import tensorflow as tf

from posenc import native


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


NATIVE = native.register(TensorFlowNative())
