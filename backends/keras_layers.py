"""Keras layers: every :class:`posenc.layers.Layer` as a ``keras.layers.Layer`` subclass.

``from posenc.backends import tensorflow as pe; bias = pe.T5RelativeBias(num_heads=12)`` is a
Keras layer holding the trained weights (``add_weight``, initialised as the layer description
says); ``bias(q_len, k_len)`` computes ``t5_bias(q_len, k_len, table, **config)`` through the
shared implementation, so it runs eagerly, inside ``tf.function(jit_compile=True)`` and in a
``keras.Model`` compiled with ``jit_compile=True``. ``get_config``/``from_config`` round-trip
and every class is registered as ``posenc>ClassName``, so ``.keras`` files save and load
(importing this module, or asking ``posenc.backends.tensorflow`` for any layer class, registers
them all).

The classes are generated from the layer descriptions; none is written by hand.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

import keras
import tensorflow as tf

from posenc.layers import Init, Layer, all_layers

__all__ = ["layer_class", "layer_factory", "register_all"]

_SELF = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _initializer(init: Init) -> keras.initializers.Initializer:
    from posenc.errors import ParameterError

    if init.kind == "normal":
        return keras.initializers.RandomNormal(0.0, init.a)
    if init.kind == "uniform":
        return keras.initializers.RandomUniform(init.a, init.b)
    if init.kind == "zeros":
        return keras.initializers.Zeros()
    if init.kind == "ones":
        return keras.initializers.Ones()
    if init.kind == "constant":
        return keras.initializers.Constant(init.a)
    if init.kind == "identity":
        return keras.initializers.Identity()
    raise ParameterError(f"unknown initialiser kind {init.kind!r}")


def _backend_dtype(name: str) -> Any:
    from .tensorflow import BACKEND

    return BACKEND.dtype(name)


class PosencLayer(keras.layers.Layer):
    """Base of the generated Keras layers."""

    layer: Layer
    _call_signature: inspect.Signature
    _has_dtype: bool
    _keeps_layout: bool

    def __init__(self, *, name: str | None = None, dtype: Any = None, trainable: bool = True,
                 autocast: bool = True, _posenc_weight_shapes: Mapping[str, tuple[int, ...]]
                 | None = None, **kwargs: Any) -> None:
        if _posenc_weight_shapes is None:
            config = self.layer.resolve_config(kwargs)  # ParameterError naming bad arguments
            shapes = self.layer.weight_shapes(config)
        else:  # built around existing weights (the conformance harness): sizes not needed
            config, shapes = dict(kwargs), dict(_posenc_weight_shapes)
        super().__init__(name=name, dtype=dtype, trainable=trainable, autocast=autocast)
        self._allow_non_tensor_positional_args = True  # layer(q_len, k_len)
        self._posenc_config = config
        by_name = {w.name: w for w in self.layer.weights}
        self._posenc_variables = {
            weight: self.add_weight(shape=shape, initializer=_initializer(by_name[weight].init),
                                    name=weight, trainable=True)
            for weight, shape in shapes.items()}
        self.built = True

    def call(self, *args: Any, **kwargs: Any) -> Any:
        bound = self._call_signature.bind(*args, **kwargs)
        # a read of each variable (autocast to the compute dtype inside Keras' autocast scope)
        weights = {k: tf.convert_to_tensor(v) for k, v in self._posenc_variables.items()}
        extra = {"dtype": _backend_dtype(self.compute_dtype)} if self._has_dtype else {}
        return self.layer.implementation()(**bound.arguments, **weights,
                                           **self.layer.function_kwargs(self._posenc_config),
                                           **extra)

    def compute_mask(self, inputs: Any, previous_mask: Any) -> Any:
        # Keras' sequence mask passes through the layers returning x-shaped results (rotary,
        # conv); the others' results are not laid out like their inputs. (``mask=`` of
        # ShawRelativeAttention is an attention mask, the function's argument, never propagated.)
        return previous_mask if self._keeps_layout else None

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), **self._posenc_config}

    @property
    def posenc_config(self) -> dict[str, Any]:
        """The resolved constructor arguments of the layer."""
        return dict(self._posenc_config)


def _doc(layer: Layer) -> str:
    args = ", ".join(k if v is inspect.Parameter.empty else f"{k}={v!r}"
                     for k, v in layer.config_defaults().items())
    return (f"{layer.doc}\n\nA Keras layer of :func:`posenc.{layer.function}`.\n\n"
            f"Constructor arguments: {args or 'none'} (plus Keras' name, dtype, trainable).\n"
            f"Weights: {', '.join(layer.weight_names) or 'none'}.")


@cache
def layer_class(name: str) -> type[PosencLayer]:
    """The generated Keras layer class for the layer named ``name`` (registered for saving)."""
    layer = all_layers()[name]
    call_parameters = layer.call_parameters()

    def call(self: PosencLayer, *args: Any, **kwargs: Any) -> Any:
        return PosencLayer.call(self, *args, **kwargs)

    # Keras reads call()'s signature (which arguments are tensors, whether there is a mask)
    call.__signature__ = inspect.Signature([_SELF, *call_parameters])  # type: ignore[attr-defined]
    attrs = {
        "layer": layer, "call": call, "__module__": "posenc.backends.tensorflow",
        "__qualname__": name, "__doc__": _doc(layer),
        "_call_signature": inspect.Signature(call_parameters),
        "_has_dtype": "dtype" in inspect.signature(layer.implementation()).parameters,
        "_keeps_layout": bool(call_parameters) and call_parameters[0].name == "x",
    }
    cls = type(name, (PosencLayer,), attrs)
    return keras.saving.register_keras_serializable(package="posenc", name=name)(cls)


def register_all() -> None:
    """Generate (and register with Keras) every layer class."""
    for name in all_layers():
        layer_class(name)


register_all()


# -- the conformance harness's layer factory ----------------------------------------------------
def layer_factory(layer: Layer, weights: dict[str, Any], config: dict[str, Any],
                  static: dict[str, Any], arrays: dict[str, Any], compiled: bool
                  ) -> Callable[[dict[str, Any], dict[str, Any]], Any]:
    """See :mod:`posenc.backends.layer_binding`: a Keras layer built around the weight arrays
    (its variables take their values), called through ``stateless_call`` with the current
    arrays as the variables' values (``tf.function(jit_compile=True)`` around it when compiled:
    new values never retrace, and gradients reach the arrays)."""
    static = dict(static)
    dtype, device = static.pop("dtype", None), static.pop("device", None)
    present = {k: v for k, v in weights.items() if v is not None}
    if dtype is not None:
        dtype_name = tf.as_dtype(dtype).name
    else:
        floats = [v.dtype for v in [*present.values(), *arrays.values()]
                  if v is not None and v.dtype.is_floating]
        dtype_name = floats[0].name if floats else "float32"
    if device is None:  # where the harness placed the arrays
        device = next((v.device for v in [*present.values(), *arrays.values()] if v is not None),
                      None)
    place = (lambda: tf.device(device)) if device else contextlib.nullcontext
    shapes = {k: tuple(int(s) for s in v.shape) for k, v in present.items()}
    with place():
        built = layer_class(layer.name)(dtype=dtype_name, autocast=False,
                                        _posenc_weight_shapes=shapes,
                                        **layer.config_from_weights(weights, config))
        for k, variable in built._posenc_variables.items():
            variable.assign(present[k])
    order = list(built._posenc_variables)

    def call(values: list[Any], named: dict[str, Any]) -> Any:
        # Keras' functional call: the layer computes with these values for its variables, so
        # gradients flow back to the arrays (and compiled, new values never retrace)
        out, _ = built.stateless_call(values, [], **static, **named)
        return out

    fn = tf.function(call, jit_compile=True, autograph=False) if compiled else call

    def run(current: dict[str, Any], named: dict[str, Any]) -> Any:
        with place():
            return fn([current[k] for k in order], named)

    return run
