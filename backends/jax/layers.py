"""JAX layers: every :class:`posenc.layers.Layer` as a pure function over a parameter pytree
(and, when Flax is installed, as a Flax NNX module).

``from posenc.backends import jax as pe; bias = pe.T5RelativeBias(num_heads=12)`` is a frozen,
hashable description of the layer (its resolved constructor config). ``params = bias.init(key)``
draws the weights (a plain ``dict`` of arrays, absent optional weights left out) and
``bias.apply(params, q_len, k_len)`` computes ``t5_bias(q_len, k_len, **params, **config)``:
a pure function, safe under ``jax.jit`` (non-array call arguments such as ``q_len`` are static:
close over them or use ``static_argnames``). ``pe.nnx.T5RelativeBias(num_heads=12,
rngs=nnx.Rngs(0))`` holds the same weights as ``nnx.Param`` and computes through ``apply``.

The classes are generated from the layer descriptions; none is written by hand.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Mapping
from functools import cache
from types import ModuleType
from typing import Any, ClassVar

import numpy as np

from posenc.errors import ParameterError
from posenc.layers import Init, Layer, all_layers

__all__ = ["JaxLayer", "layer_class", "layer_factory", "nnx_layer_class", "nnx_module"]


def _freeze(value: Any) -> Any:
    """A hashable stand-in for a config value (dicts and lists become sorted tuples)."""
    if isinstance(value, Mapping):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    return value


def _dtype(dtype: Any) -> Any:
    import jax.numpy as jnp

    if isinstance(dtype, str):
        try:
            return getattr(jnp, dtype)
        except AttributeError:
            raise ParameterError(f"unknown dtype {dtype!r}") from None
    return dtype


def _draw(init: Init, key: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    import jax
    import jax.numpy as jnp

    if init.kind == "normal":
        return init.a * jax.random.normal(key, shape, dtype)
    if init.kind == "uniform":
        return jax.random.uniform(key, shape, dtype, minval=init.a, maxval=init.b)
    if init.kind == "zeros":
        return jnp.zeros(shape, dtype)
    if init.kind == "ones":
        return jnp.ones(shape, dtype)
    if init.kind == "constant":
        return jnp.full(shape, init.a, dtype)
    if init.kind == "identity":
        if len(shape) != 2 or shape[0] != shape[1]:
            raise ParameterError(f"identity initialiser needs a square shape, got {shape}")
        return jnp.eye(shape[0], dtype=dtype)
    raise ParameterError(f"unknown initialiser kind {init.kind!r}")


def _convert(value: Any) -> Any:
    """NumPy arrays and lists of numbers become JAX arrays; everything else is left alone."""
    if isinstance(value, np.ndarray | np.generic) or (
            isinstance(value, list) and value and not isinstance(value[0], str)):
        import jax.numpy as jnp

        return jnp.asarray(value)
    return value


class JaxLayer:
    """Base of the generated JAX layer descriptions (frozen and hashable)."""

    layer: ClassVar[Layer]
    _call_signature: ClassVar[inspect.Signature]
    _has_dtype: ClassVar[bool]
    __slots__ = ("_config", "_device", "_dtype", "_shapes")

    def __init__(self, *, dtype: Any = None, device: Any = None, **kwargs: Any) -> None:
        config = self.layer.resolve_config(kwargs)
        self._setup(config, self.layer.weight_shapes(config), dtype, device)

    def _setup(self, config: dict[str, Any], shapes: dict[str, tuple[int, ...]], dtype: Any,
               device: Any) -> None:
        if not self._has_dtype and (dtype is not None or device is not None):
            raise ParameterError(f"{self.layer.name}: dtype= and device= are for layers whose "
                                 f"function builds its result ({self.layer.function} takes "
                                 "the dtype of its inputs)")
        object.__setattr__(self, "_config", dict(config))
        object.__setattr__(self, "_shapes", dict(shapes))
        object.__setattr__(self, "_dtype", _dtype(dtype or "float32") if self._has_dtype else None)
        object.__setattr__(self, "_device", device)

    @classmethod
    def from_weights(cls, weights: Mapping[str, Any], config: Mapping[str, Any], *,
                     dtype: Any = None, device: Any = None) -> JaxLayer:
        """The layer for existing weight arrays (``None`` for an absent optional weight) and
        the function's construction keyword arguments; the weights' shapes are taken as given."""
        full = cls.layer.config_from_weights(weights, config)
        self = object.__new__(cls)
        shapes = {k: tuple(int(s) for s in v.shape) for k, v in weights.items() if v is not None}
        self._setup(full, shapes, dtype, device)
        return self

    # -- frozen and hashable -----------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen (cannot set {name!r})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen (cannot delete {name!r})")

    def __reduce__(self) -> tuple[Any, ...]:  # copy and pickle despite the frozen __setattr__
        return (_rebuild, (self.layer.name, self._config, self._shapes, self._dtype,
                           self._device))

    def _key(self) -> Any:
        return (type(self).__name__, _freeze(self._config), _freeze(self._shapes),
                str(self._dtype), self._device)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._key() == self._key()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._config.items())
        if self._has_dtype:
            args += f", dtype={getattr(self._dtype, '__name__', self._dtype)}"
        return f"{type(self).__name__}({args})"

    def __getattr__(self, name: str) -> Any:
        config = object.__getattribute__(self, "_config")
        if name in config:
            return config[name]
        raise AttributeError(f"{type(self).__name__!r} has no attribute {name!r}")

    @property
    def config(self) -> dict[str, Any]:
        """The resolved constructor arguments."""
        return dict(self._config)

    @property
    def dtype(self) -> Any:
        return self._dtype

    @property
    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        return dict(self._shapes)

    # -- parameters --------------------------------------------------------------------------
    def init(self, key: Any, dtype: Any = "float32") -> dict[str, Any]:
        """The weights drawn with ``jax.random`` from each weight's initialiser."""
        import jax

        dtype = _dtype(dtype)
        names = list(self._shapes)
        keys = jax.random.split(key, max(len(names), 1))
        by_name = {w.name: w for w in self.layer.weights}
        return {name: _draw(by_name[name].init, k, self._shapes[name], dtype)
                for name, k in zip(names, keys, strict=False)}

    def check_params(self, params: Mapping[str, Any]) -> None:
        """Raise :class:`ParameterError` naming any missing, unexpected or misshapen weight."""
        if not isinstance(params, Mapping):
            raise ParameterError(f"{self.layer.name}: params must be a dict of weights "
                                 f"{sorted(self._shapes)}, got {type(params).__name__}")
        missing = sorted(set(self._shapes) - set(params))
        unexpected = sorted(set(params) - set(self._shapes))
        if missing or unexpected:
            raise ParameterError(
                f"{self.layer.name}: params " + "; ".join(
                    [*([f"missing {', '.join(missing)}"] if missing else []),
                     *([f"unexpected {', '.join(unexpected)}"] if unexpected else [])])
                + f" (expected {', '.join(sorted(self._shapes)) or 'none'})")
        for name, shape in self._shapes.items():
            got = tuple(getattr(params[name], "shape", ()))
            if got != shape:
                raise ParameterError(f"{self.layer.name}: param {name!r} has shape {got}, "
                                     f"expected {shape}")

    def apply(self, params: Mapping[str, Any], *args: Any, **kwargs: Any) -> Any:
        """``function(*args, **kwargs, **params, **config)``: pure and jit-safe."""
        self.check_params(params)
        try:
            bound = self._call_signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise ParameterError(f"{self.layer.name}: {exc} (call arguments: "
                                 f"{self._call_signature})") from None
        call = {k: _convert(v) for k, v in bound.arguments.items()}
        extra = {}
        if self._has_dtype:
            extra["dtype"] = self._dtype
            if self._device is not None:
                extra["device"] = self._device
        weights = {k: _convert(v) for k, v in params.items()}
        return self.layer.implementation()(**call, **weights,
                                           **self.layer.function_kwargs(self._config), **extra)


def _rebuild(name: str, config: dict[str, Any], shapes: dict[str, tuple[int, ...]], dtype: Any,
             device: Any) -> JaxLayer:
    self = object.__new__(layer_class(name))
    self._setup(config, shapes, dtype, device)
    return self


def _doc(layer: Layer, how: str) -> str:
    args = ", ".join(k if v is inspect.Parameter.empty else f"{k}={v!r}"
                     for k, v in layer.config_defaults().items())
    weights = ", ".join(layer.weight_names) or "none"
    return (f"{layer.doc}\n\n{how} of :func:`posenc.{layer.function}`.\n\n"
            f"Constructor arguments: {args or 'none'}.\nWeights: {weights}.")


@cache
def layer_class(name: str) -> type[JaxLayer]:
    """The generated JAX layer class for the layer named ``name``."""
    layer = all_layers()[name]
    params = inspect.signature(layer.implementation()).parameters
    attrs = {
        "layer": layer, "__slots__": (), "__module__": "posenc.backends.jax",
        "__qualname__": name, "__doc__": _doc(layer, "A pure JAX layer (init/apply)"),
        "_call_signature": inspect.Signature(layer.call_parameters()),
        "_has_dtype": "dtype" in params,
    }
    return type(name, (JaxLayer,), attrs)


# -- Flax NNX ----------------------------------------------------------------------------------
@cache
def nnx_layer_class(name: str) -> type:
    """The generated Flax NNX module for the layer named ``name`` (imports Flax)."""
    from flax import nnx

    description = layer_class(name)
    layer = description.layer

    def __init__(self: Any, *, rngs: Any, param_dtype: Any = "float32", dtype: Any = None,
                 device: Any = None, **kwargs: Any) -> None:
        self.description = description(dtype=dtype, device=device, **kwargs)
        params = self.description.init(rngs.params(), param_dtype)
        for w in layer.weights:
            setattr(self, w.name, nnx.Param(params[w.name]) if w.name in params else None)

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        params = {w.name: getattr(self, w.name)[...] for w in layer.weights
                  if getattr(self, w.name) is not None}
        return self.description.apply(params, *args, **kwargs)

    attrs = {"__init__": __init__, "__call__": __call__, "__module__": "posenc.backends.jax.nnx",
             "__qualname__": name, "__doc__": _doc(layer, "A Flax NNX module")}
    return type(name, (nnx.Module,), attrs)


@cache
def nnx_module() -> ModuleType:
    """``posenc.backends.jax.nnx``: the NNX modules, resolved lazily by name."""
    module = ModuleType("posenc.backends.jax.nnx", "Flax NNX modules of every posenc layer.")

    def __getattr__(name: str) -> Any:
        if name.startswith("__") or name not in all_layers():
            raise AttributeError(f"module 'posenc.backends.jax.nnx' has no attribute {name!r}")
        return nnx_layer_class(name)

    def __dir__() -> list[str]:
        return sorted(all_layers())

    module.__getattr__ = __getattr__  # type: ignore[attr-defined]
    module.__dir__ = __dir__  # type: ignore[method-assign]
    sys.modules.setdefault(module.__name__, module)
    return module


# -- the conformance harness's layer factory ----------------------------------------------------
def layer_factory(layer: Layer, weights: dict[str, Any], config: dict[str, Any],
                  static: dict[str, Any], arrays: dict[str, Any], compiled: bool
                  ) -> Callable[[dict[str, Any], dict[str, Any]], Any]:
    """See :mod:`posenc.backends.layer_binding`: the layer built from the weight arrays, called
    through ``apply`` (``jax.jit`` of ``apply`` with the weights as an argument when compiled, so
    new weight values never recompile)."""
    import jax

    static = dict(static)
    dtype, device = static.pop("dtype", None), static.pop("device", None)
    description = layer_class(layer.name).from_weights(weights, config, dtype=dtype,
                                                       device=device)

    def call(params: dict[str, Any], named: dict[str, Any]) -> Any:
        return description.apply(params, **static, **named)

    fn = jax.jit(call) if compiled else call

    def run(current: dict[str, Any], named: dict[str, Any]) -> Any:
        return fn({k: v for k, v in current.items() if v is not None}, named)

    return run
