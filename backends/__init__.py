"""Backends: one module per array library, found by name without importing any framework.

A backend is named by (a) a registered name (entry-point group ``posenc.backends``; the
built-in ones are registered the same way), (b) the import path of any module that is an
array-API namespace, or (c) ``module:attr`` naming a :class:`Backend` object or a namespace.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from types import ModuleType

from posenc.errors import BackendError

from .backend import Backend, namespace_backend

__all__ = ["BUILTIN", "Backend", "get_backend", "installed_backends", "registered_backends"]

# Order matters: torch is imported before TensorFlow when a run uses both.
BUILTIN = ("numpy", "strict", "torch", "jax", "tensorflow")
# The same frameworks checked through their layer APIs (nn.Module, pytree functions, Keras).
LAYER_BACKENDS = {"torch-layers": "torch", "jax-layers": "jax", "keras-layers": "tensorflow"}
# Backends that override encodings with fused kernels (module names)
KERNEL_BACKENDS = {"torch-triton": "torch_triton"}
# Other people's implementations as backends ("peer:NAME"), run only when named
PEER_PREFIX = "peer:"


def registered_backends() -> dict[str, str]:
    """Registered backend names mapped to their ``module:attr`` targets."""
    found = {name: f"posenc.backends.{name}:BACKEND" for name in BUILTIN}
    found.update({name: f"posenc.backends.{module}:LAYER_BACKEND"
                  for name, module in LAYER_BACKENDS.items()})
    found.update({name: f"posenc.backends.{module}:BACKEND"
                  for name, module in KERNEL_BACKENDS.items()})
    from .peers import PEERS

    found.update({PEER_PREFIX + name: f"posenc.backends.peers.{module}:BACKEND"
                  for name, module in PEERS.items()})
    for ep in entry_points(group="posenc.backends"):
        found.setdefault(ep.name, ep.value)
    return found


def _is_namespace(module: ModuleType) -> bool:
    return hasattr(module, "__array_api_version__") and hasattr(module, "asarray")


def _from_object(label: str, obj: object) -> Backend:
    if isinstance(obj, Backend):
        return obj
    if isinstance(obj, ModuleType) and isinstance(getattr(obj, "BACKEND", None), Backend):
        return obj.BACKEND
    if isinstance(obj, ModuleType) and _is_namespace(obj):
        return namespace_backend(label, obj)
    raise BackendError(
        f"{label!r} is neither a posenc Backend nor an array-API namespace module "
        "(expected __array_api_version__ and asarray, or a BACKEND object)")


def _import(module_name: str, label: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise BackendError(f"cannot import backend {label!r}: {exc}") from exc


def get_backend(name: str | Backend) -> Backend:
    """Resolve a backend from a registered name, a namespace module path or ``module:attr``."""
    if isinstance(name, Backend):
        return name
    target = registered_backends().get(name, name)
    if ":" in target:
        module_name, _, attr = target.partition(":")
        module = _import(module_name, name)
        try:
            obj = getattr(module, attr)
        except AttributeError:
            raise BackendError(f"backend {name!r}: module {module_name!r} has no {attr!r}") from None
        return _from_object(name, obj)
    return _from_object(name, _import(target, name))


def installed_backends() -> list[str]:
    """Registered backends whose framework is installed (checked without importing it); peer
    adapters are left out (they run when named: ``--backend peer:transformers``)."""
    names = []
    for name in registered_backends():
        if name.startswith(PEER_PREFIX):
            continue
        try:
            backend = get_backend(name)
        except BackendError:
            continue
        if backend.available():
            names.append(name)
    return names
