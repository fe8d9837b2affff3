"""How the harness checks an encoding through a framework's layer API.

A layer backend (``torch-nn``, ``jax-pytree``, ``keras``, ...) is the framework's backend with a
``bind`` hook: for each golden case or property call, the weight arrays (the function
arguments a :class:`~posenc.layers.Layer` declares trainable) become the layer's own weights,
the construction parameters its config, and the remaining arrays and parameters its call
arguments. The framework supplies one ``factory``; this module does the bookkeeping.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from posenc.layers import Layer, all_layers, layer_for_function

# factory(layer, weights, config, static, arrays, compiled) -> run(weights, arrays) -> result:
# built once per signature of the inputs (shapes and dtypes), called for every input.
Factory = Callable[[Layer, dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any], bool],
                   Callable[[dict[str, Any], dict[str, Any]], Any]]


def covered_functions(extra: tuple[str, ...] = ()) -> frozenset[str]:
    """The functions that have a layer (plus ``extra``)."""
    return frozenset({layer.function for layer in all_layers().values()} | set(extra))


def _signature(value: Any) -> Any:
    if value is None:
        return None
    return (tuple(int(s) for s in value.shape), str(value.dtype))


def layer_bind(factory: Factory) -> Callable[..., Callable[..., Any]]:
    """A :attr:`Backend.bind` hook from a framework's layer factory."""

    def bind(function: str, names: tuple[str, ...], params: dict[str, Any],
             compiled: bool) -> Callable[..., Any]:
        layer = layer_for_function(function)
        if layer is None:
            raise LookupError(f"no layer computes {function!r}")
        config = {k: v for k, v in params.items() if k in layer.config}
        static = {k: v for k, v in params.items() if k not in layer.config}
        built: dict[Any, Callable[[dict[str, Any], dict[str, Any]], Any]] = {}

        def call(*values: Any) -> Any:
            arrays = dict(zip(names, values, strict=True))
            weights = {w.name: arrays.pop(w.name, None) for w in layer.weights}
            key = tuple((k, _signature(v)) for k, v in sorted({**weights, **arrays}.items()))
            if key not in built:
                built[key] = factory(layer, weights, config, static, arrays, compiled)
            return built[key](weights, arrays)

        return call

    return bind
