"""PyTorch ``nn.Module``s for the encodings: ``from posenc.backends import torch as pe``.

Every :class:`posenc.layers.Layer` becomes a module class (``pe.T5RelativeBias(num_heads=12)``)
whose trainable arguments are ``nn.Parameter``s named after the function's arguments (so a
``state_dict`` maps onto them), and whose ``forward`` is the shared, conformance-verified
function. ``pe.RotaryEmbedding`` adds what a model needs from RoPE: cos/sin tables built once,
q and k rotated in one pass (k may have fewer heads: grouped-query attention), and in-place or
``out=`` rotation.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from posenc.errors import ParameterError
from posenc.layers import Init, Layer, all_layers

from .rotary_embedding import RotaryEmbedding, rotary_factory

__all__ = ["RotaryEmbedding", "layer_class", "layer_classes", "layer_factory"]


def _initial(init: Init, shape: tuple[int, ...], dtype: Any, device: Any) -> torch.Tensor:
    out = torch.empty(shape, dtype=dtype, device=device)
    with torch.no_grad():
        if init.kind == "normal":
            out.normal_(0.0, init.a)
        elif init.kind == "uniform":
            out.uniform_(init.a, init.b)
        elif init.kind in ("zeros", "ones", "constant"):
            out.fill_({"zeros": 0.0, "ones": 1.0}.get(init.kind, init.a))
        elif init.kind == "identity":
            out.copy_(torch.eye(shape[0], dtype=dtype, device=device))
        else:
            raise ParameterError(f"unknown initialiser kind {init.kind!r}")
    return out


def _takes_dtype(layer: Layer) -> bool:
    import inspect

    return "dtype" in inspect.signature(layer.implementation()).parameters


class _LayerModule(nn.Module):
    """Base of the generated classes: weights as parameters, config fixed, forward = function."""

    layer: Layer
    _function: Any  # the implementation, bound at class creation (nothing to look up in a trace)

    def __init__(self, *, dtype: Any = None, device: Any = None, **kwargs: Any) -> None:
        super().__init__()
        config = self.layer.resolve_config(kwargs)
        shapes = self.layer.weight_shapes(config)
        dtype = dtype or torch.get_default_dtype()
        weights = {w.name: _initial(w.init, shapes[w.name], dtype, device) if w.name in shapes
                   else None for w in self.layer.weights}
        self._setup(config, weights, dtype, device)

    @classmethod
    def from_weights(cls, weights: Mapping[str, torch.Tensor | None], *, dtype: Any = None,
                     device: Any = None, **config: Any) -> _LayerModule:
        """A module holding copies of existing weights (shapes come from them)."""
        module = cls.__new__(cls)
        nn.Module.__init__(module)
        unknown = sorted(set(weights) - set(cls.layer.weight_names))
        if unknown:
            raise ParameterError(f"{cls.layer.name}: unknown weight(s) {', '.join(unknown)} "
                                 f"(weights: {', '.join(cls.layer.weight_names)})")
        resolved = cls.layer.config_from_weights(weights, config)
        copies = {n: None if w is None else w.detach().clone() for n, w in weights.items()}
        first = next((w for w in copies.values() if w is not None), None)
        dtype = dtype or (first.dtype if first is not None else torch.get_default_dtype())
        device = device or (first.device if first is not None else None)
        module._setup(resolved, copies, dtype, device)
        return module

    def _setup(self, config: dict[str, Any], weights: Mapping[str, torch.Tensor | None],
               dtype: Any, device: Any) -> None:
        self.config = config
        self._kwargs = self.layer.function_kwargs(config)
        self._call_names = [p.name for p in self.layer.call_parameters()]
        for w in self.layer.weights:
            value = weights.get(w.name)
            self.register_parameter(w.name, None if value is None else nn.Parameter(value))
        if _takes_dtype(self.layer):
            # follows .to(dtype/device) like a parameter; tells the function where to build
            self.register_buffer("_anchor", torch.empty(0, dtype=dtype, device=device),
                                 persistent=False)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) > len(self._call_names):
            raise ParameterError(f"{self.layer.name}: {len(args)} positional arguments, "
                                 f"expected at most {len(self._call_names)} "
                                 f"({', '.join(self._call_names)})")
        call = dict(zip(self._call_names, args, strict=False))
        clash = sorted(set(call) & set(kwargs))
        if clash:
            raise ParameterError(f"{self.layer.name}: {', '.join(clash)} given twice")
        call.update(kwargs)
        weights = {w.name: getattr(self, w.name) for w in self.layer.weights}
        if hasattr(self, "_anchor"):
            call.update(dtype=self._anchor.dtype, device=self._anchor.device)
        return self._function(**call, **weights, **self._kwargs)

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.config.items())


@functools.cache
def layer_class(name: str) -> type[nn.Module]:
    """The ``nn.Module`` class of layer ``name`` (``RotaryEmbedding`` is hand-written)."""
    if name == "RotaryEmbedding":
        return RotaryEmbedding
    layer = all_layers()[name]
    return type(name, (_LayerModule,), {
        "layer": layer, "_function": staticmethod(layer.implementation()),
        "__doc__": _doc(layer), "__module__": "posenc.backends.torch"})


def layer_classes() -> dict[str, type[nn.Module]]:
    return {name: layer_class(name) for name in all_layers()}


def _doc(layer: Layer) -> str:
    sizes = ", ".join(layer.sizes) or "none"
    return (f"{layer.doc}.\n\nComputes posenc.{layer.function}. Constructor: sizes ({sizes}), "
            f"the function's {', '.join(layer.config) or 'no'} parameters, dtype=, device=. "
            f"Parameters: {', '.join(layer.weight_names) or 'none'}.")


def layer_factory(layer: Layer, weights: dict[str, Any], config: dict[str, Any],
                    static: dict[str, Any], arrays: dict[str, Any], compiled: bool) -> Any:
    """The conformance harness's view of a layer (see ``backends/layer_binding.py``): the module
    built from the weight arrays, compiled with ``torch.compile(fullgraph=True)`` when asked.
    ``rope`` goes through ``RotaryEmbedding`` with q and k in one pass (k = q, so both results
    must agree bit for bit) and, for integer positions in [0, 2^16), its cos/sin tables."""
    static = dict(static)
    dtype, device = static.pop("dtype", None), static.pop("device", None)
    if layer.name == "RotaryEmbedding":
        return rotary_factory(config, arrays, compiled)
    module = layer_class(layer.name).from_weights(weights, dtype=dtype, device=device, **config)
    runner = torch.compile(module, fullgraph=True) if compiled else module

    def run(weights: dict[str, Any], arrays: dict[str, Any]) -> Any:
        present = {name: value for name, value in weights.items() if value is not None}
        if not compiled:  # the arrays become the parameters, so gradients reach them
            return torch.func.functional_call(module, present, kwargs={**arrays, **static})
        with torch.no_grad():
            for name, value in present.items():
                getattr(module, name).copy_(value)
            return runner(**arrays, **static)

    return run
