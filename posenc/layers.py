"""Framework-neutral descriptions of the encodings as layers: which arguments of an encoding
function are trainable weights (with their shapes and initialisers), which are fixed when the
layer is built, and which are passed on each call.

Each encoding module declares its layers in ``LAYERS`` next to its functions; the framework
backends (``posenc.backends.torch``, ``.jax``, ``.tensorflow``) turn every description into an
``nn.Module``, a pure function over a parameter pytree (and a Flax NNX module), and a Keras
layer. All of them compute through the same conformance-verified function, so a layer adds no
arithmetic of its own: ``layer(*call_args) == function(*call_args, **weights, **config)``.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from . import params
from .errors import ParameterError

__all__ = ["Init", "Layer", "Weight", "all_layers", "layer_for_function"]


@dataclass(frozen=True)
class Init:
    """An initialiser: ``normal`` (std ``a``), ``uniform`` on ``[a, b)``, ``zeros``, ``ones``,
    ``constant`` (``a``), ``identity`` (square matrices). Framework backends draw with their
    own random generators; :meth:`numpy` is the host version (seeded)."""

    kind: str
    a: float = 0.0
    b: float = 0.0

    def numpy(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        if self.kind == "normal":
            return rng.normal(0.0, self.a, size=shape)
        if self.kind == "uniform":
            return rng.uniform(self.a, self.b, size=shape)
        if self.kind == "zeros":
            return np.zeros(shape)
        if self.kind == "ones":
            return np.ones(shape)
        if self.kind == "constant":
            return np.full(shape, self.a)
        if self.kind == "identity":
            if len(shape) != 2 or shape[0] != shape[1]:
                raise ParameterError(f"identity initialiser needs a square shape, got {shape}")
            return np.eye(shape[0])
        raise ParameterError(f"unknown initialiser kind {self.kind!r}")


def normal(std: float) -> Init:
    return Init("normal", std)


def uniform(low: float, high: float) -> Init:
    return Init("uniform", low, high)


ZEROS, ONES, IDENTITY = Init("zeros"), Init("ones"), Init("identity")


@dataclass(frozen=True)
class Weight:
    """A trainable argument of the function: its shape from the layer's constructor arguments
    (``shape(config)``), its initialiser, and whether the layer may omit it (``optional``: a
    size argument; the weight is built unless it is None or False, else the function receives
    None)."""

    name: str
    shape: Callable[[Mapping[str, Any]], tuple[int, ...]]
    init: Init = field(default_factory=lambda: normal(0.02))
    optional: str | None = None

    def present(self, config: Mapping[str, Any]) -> bool:
        return self.optional is None or config.get(self.optional) not in (None, False)


@dataclass(frozen=True)
class Layer:
    """An encoding function seen as a layer.

    ``name``: the class name in every framework (``T5RelativeBias``). ``function``: the public
    encoding function. ``weights``: its trainable arguments. ``sizes``: constructor arguments
    that only shape the weights (``num_heads``), with defaults in ``size_defaults``; every
    other constructor argument is a keyword parameter of the function fixed at construction
    (``config``). Whatever else the function takes is passed on each call.
    """

    name: str
    function: str
    weights: tuple[Weight, ...] = ()
    sizes: tuple[str, ...] = ()
    size_defaults: Mapping[str, Any] = field(default_factory=dict)
    config: tuple[str, ...] = ()
    doc: str = ""

    @property
    def weight_names(self) -> tuple[str, ...]:
        return tuple(w.name for w in self.weights)

    def implementation(self) -> Callable[..., Any]:
        from .encodings import public_functions

        return public_functions()[self.function]

    def call_parameters(self) -> list[inspect.Parameter]:
        """The function's parameters a call passes: neither weights nor construction config."""
        fixed = {*self.weight_names, *self.config, "dtype", "device"}
        return [p for p in inspect.signature(self.implementation()).parameters.values()
                if p.name not in fixed]

    def config_defaults(self) -> dict[str, Any]:
        """Constructor arguments with their defaults (required sizes map to ``inspect._empty``)."""
        params = inspect.signature(self.implementation()).parameters
        out: dict[str, Any] = {s: self.size_defaults.get(s, inspect.Parameter.empty)
                               for s in self.sizes}
        for name in self.config:
            out[name] = params[name].default
        return out

    def resolve_config(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The constructor's keyword arguments checked and completed with defaults."""
        known = self.config_defaults()
        unknown = sorted(set(kwargs) - set(known))
        if unknown:
            raise ParameterError(
                f"{self.name}: unknown argument(s) {', '.join(unknown)} "
                f"(known: {', '.join(known) or 'none'})")
        config = {**known, **kwargs}
        missing = [k for k, v in config.items() if v is inspect.Parameter.empty]
        if missing:
            raise ParameterError(f"{self.name}: missing required argument(s) {', '.join(missing)}")
        for size in self.sizes:
            config[size] = self._check_size(size, config[size])
        return config

    def _check_size(self, size: str, value: Any) -> Any:
        """A size argument: a switch for an optional weight (``c2p=True``), an optional width
        (``value_dim=None``), or a width >= 1 (an int: ``num_heads=2.5`` is an error, not 2)."""
        switch = isinstance(self.size_defaults.get(size), bool)
        optional = any(w.optional == size for w in self.weights)
        if switch:
            return params.flag(f"{self.name}: {size}", value)
        if optional and value is None:
            return None
        return params.integer(f"{self.name}: {size}", value, minimum=1)

    def weight_shapes(self, config: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
        """Shapes of the weights this configuration builds (absent optional ones left out)."""
        shapes = {}
        for w in self.weights:
            if w.present(config):
                shape = tuple(int(s) for s in w.shape(config))
                if any(s < 0 for s in shape):
                    raise ParameterError(f"{self.name}: weight {w.name} would have shape {shape}")
                shapes[w.name] = shape
        return shapes

    def function_kwargs(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The construction config as the function's keyword arguments (sizes dropped)."""
        return {k: config[k] for k in self.config if k in config}

    def config_from_weights(self, weights: Mapping[str, Any], config: Mapping[str, Any]
                            ) -> dict[str, Any]:
        """A constructor config for existing weights (sizes are not needed then, so they are
        filled with a placeholder, and optional flags follow which weights are present)."""
        unknown = sorted(set(config) - {*self.config, *self.sizes})
        if unknown:
            raise ParameterError(
                f"{self.name}: unknown argument(s) {', '.join(unknown)} "
                f"(known: {', '.join(self.config) or 'none'})")
        out = {**{s: None for s in self.sizes}, **self.function_kwargs(config)}
        for w in self.weights:
            if w.optional is not None:
                out[w.optional] = weights.get(w.name) is not None
        for name, value in self.config_defaults().items():
            out.setdefault(name, value)
        return out


@cache
def all_layers() -> dict[str, Layer]:
    """Every layer declared by an encoding module (``LAYERS``), by class name."""
    from . import encodings

    found: dict[str, Layer] = {}
    for info in pkgutil.iter_modules(encodings.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{encodings.__name__}.{info.name}")
        for layer in getattr(module, "LAYERS", ()):
            if layer.name in found:
                raise RuntimeError(f"posenc layers: {layer.name!r} is declared twice")
            found[layer.name] = layer
    return found


def layer_for_function(function: str) -> Layer | None:
    """The layer computing ``function`` (None when the function has none)."""
    for layer in all_layers().values():
        if layer.function == function:
            return layer
    return None
