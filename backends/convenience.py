"""Per-backend convenience functions: ``from posenc.backends import torch as pe; pe.rope(x)``.

Each function is the shared implementation (or the backend's override) with its array inputs
converted to the backend's arrays (lists and NumPy arrays are accepted), dtype names such as
``"bfloat16"`` resolved, and a ``device=`` keyword placing the arrays it converts ("cpu", "cuda").
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import sys
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .backend import Backend


def _is_foreign(value: Any) -> bool:
    return isinstance(value, list | tuple | int | np.ndarray | np.generic)


def wrap(backend: Backend, name: str) -> Callable[..., Any]:
    from posenc.catalog import spec_for_function

    impl = backend.function(name)
    spec = spec_for_function(name)
    array_inputs = [i.name for i in spec.inputs] if spec else []
    signature = inspect.signature(impl)
    names = list(signature.parameters)
    # the arguments of a call with nothing to convert go straight through: binding them to
    # the signature costs more than the rest of a decode step's rope
    direct = "dtype" not in signature.parameters
    positional_arrays = [i for i, n in enumerate(names) if n in array_inputs]

    @functools.wraps(impl)
    def call(*args: Any, device: Any = None, **kwargs: Any) -> Any:
        backend.namespace()  # a clear MissingFrameworkError before anything else
        if direct and device is None \
                and not any(i < len(args) and _is_foreign(args[i]) for i in positional_arrays) \
                and not any(_is_foreign(kwargs[n]) for n in array_inputs if n in kwargs):
            return impl(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        for arg in array_inputs:
            value = bound.arguments.get(arg)
            if value is not None and _is_foreign(value):
                bound.arguments[arg] = _convert(backend, arg, value, device)
        if "dtype" in signature.parameters:
            dtype = bound.arguments.get("dtype")
            # no dtype: this backend's float32 (a function without array inputs would
            # otherwise have nothing to tell it which framework to build its result in)
            if isinstance(dtype, np.dtype) or (isinstance(dtype, type)
                                               and issubclass(dtype, np.generic)):
                dtype = np.dtype(dtype).name  # np.float32 names the backend's float32
            bound.arguments["dtype"] = backend.dtype(dtype or "float32") \
                if dtype is None or isinstance(dtype, str) else dtype
        if "device" in signature.parameters and device is not None:
            bound.arguments["device"] = backend.device_object(device)
        return impl(*bound.args, **bound.kwargs)

    params = [p for p in signature.parameters.values() if p.name != "device"]
    device_param = inspect.Parameter("device", inspect.Parameter.KEYWORD_ONLY, default=None)
    call.__signature__ = signature.replace(parameters=[*params, device_param])
    return call


def _convert(backend: Backend, name: str, value: Any, device: Any) -> Any:
    """A list or NumPy array as the backend's array: integers (and an empty list) as its index
    dtype, checked to fit it (JAX without x64 holds int32; uint64 beyond int64 would wrap)."""
    from posenc import array_api
    from posenc.errors import ParameterError

    try:
        host = np.asarray(value)
    except ValueError as exc:  # ragged nesting
        raise ParameterError(f"{name} is not a rectangular array: {exc}") from None
    integral = host.dtype.kind in "iu" or (host.size == 0 and not isinstance(value, np.ndarray))
    if not integral and host.dtype.kind not in "fcb":
        raise ParameterError(f"{name} must hold numbers, got a {host.dtype} array")
    dtype = backend.index_dtype if integral else host.dtype.name
    try:
        converted = backend.from_numpy(host, dtype, device)
    except (AttributeError, TypeError) as exc:  # a dtype the library lacks (strict: float16)
        raise ParameterError(f"{name}: {backend.name} arrays cannot hold {dtype} values "
                             f"({exc})") from None
    if integral and host.size:
        info = np.iinfo(array_api.dtype_name(converted.dtype))
        low, high = int(host.min()), int(host.max())
        if low < info.min or high > info.max:
            value = low if low < info.min else high
            raise ParameterError(
                f"{name} contains {value}, outside the range of {info.dtype} (the index dtype "
                f"of {backend.name} arrays here)")
    return converted


def bind_module(backend: Backend, *, layers: str | None = None, layer_backend: str | None = None,
                extras: Mapping[str, Callable[[], Any]] | None = None,
                ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for a backend module (PEP 562), resolved lazily: the
    encoding functions; with ``layers`` (the module generating the framework's layer classes,
    imported on first use) the layer classes by name and ``LAYER_BACKEND``, the conformance
    harness's view of them named ``layer_backend``; ``extras``: more names (e.g. ``nnx``)."""
    module_name = sys._getframe(1).f_globals["__name__"]
    cache: dict[str, Callable[..., Any]] = {}
    extras = dict(extras or {})

    def __getattr__(name: str) -> Any:
        from posenc.encodings import public_functions

        if name in extras:
            return extras[name]()
        if layers is not None:
            if name == "LAYER_BACKEND":
                if "LAYER_BACKEND" not in cache:
                    cache["LAYER_BACKEND"] = _layer_backend(
                        backend, layers, layer_backend or f"{backend.name}-layers")
                return cache["LAYER_BACKEND"]
            if name[:1].isupper():
                from posenc.layers import all_layers

                if name in all_layers():
                    return importlib.import_module(layers).layer_class(name)
        if name not in cache:
            if name.startswith("__") or name not in public_functions():
                raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
            cache[name] = wrap(backend, name)
        return cache[name]

    def __dir__() -> list[str]:
        from posenc.encodings import public_functions
        from posenc.layers import all_layers

        names = {*sys.modules[module_name].__dict__, *public_functions(), *extras}
        if layers is not None:
            names |= {*all_layers(), "LAYER_BACKEND"}
        return sorted(names)

    return __getattr__, __dir__


def _layer_backend(backend: Backend, layers: str, name: str) -> Backend:
    """The framework backend checked through its layers (see ``layer_binding.py``)."""
    from .layer_binding import covered_functions, layer_bind

    def factory(*args: Any) -> Any:
        return importlib.import_module(layers).layer_factory(*args)

    return dataclasses.replace(backend, name=name, bind=layer_bind(factory),
                               functions=covered_functions())
