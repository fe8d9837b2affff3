"""Backends: one module per array library, found by name without importing any framework.

A backend is named by (a) a registered name (entry-point group ``posenc.backends``; the
built-in ones are registered the same way), (b) the import path of any module that is an
array-API namespace, or (c) ``module:attr`` naming a :class:`Backend` object or a namespace.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import sys
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType

from posenc.errors import BackendError

from .backend import Backend, namespace_backend

__all__ = ["BUILTIN", "Backend", "get_backend", "installed_backends", "load_object",
           "registered_backends"]

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
    from .peers import ENGINES, PEERS

    found.update({PEER_PREFIX + name: f"posenc.backends.peers.{module}:BACKEND"
                  for name, module in {**PEERS, **ENGINES}.items()})
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
        f"(expected __array_api_version__ and asarray, or a BACKEND object); {_way_forward(obj)}")


# libraries that are not array-API namespaces themselves, and array_api_compat's wrapper of each
COMPAT_WRAPPED = {"numpy": "array_api_compat.numpy", "cupy": "array_api_compat.cupy",
                  "torch": "array_api_compat.torch", "dask.array": "array_api_compat.dask.array"}


def _way_forward(obj: object) -> str:
    """What to pass instead: array_api_compat's namespace for a library it wraps, else the two
    kinds of object a backend can be."""
    name = getattr(obj, "__name__", "")
    if name in COMPAT_WRAPPED:
        return f"use array_api_compat's namespace for it: --backend {COMPAT_WRAPPED[name]}"
    return ("pass the library's array-API namespace (array_api_compat wraps "
            f"{', '.join(COMPAT_WRAPPED)}: --backend array_api_compat.<library>), or write a "
            "posenc Backend for it (docs/backends.md) and pass 'module:BACKEND'")


IMPORTABLE = ("the module must be importable: give its file path ('./my_adapter.py:BACKEND'), "
              "run from the directory that holds it, or put that directory on PYTHONPATH (or "
              "`pip install -e` its package)")


def _from_file(path: Path, label: str, what: str) -> ModuleType:
    if not path.is_file():
        raise BackendError(f"cannot import {what} {label!r}: no file {path}")
    name = f"posenc_user_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise BackendError(f"cannot import {what} {label!r}: {path} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.parent.resolve()))  # its sibling modules import too
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        raise BackendError(f"cannot import {what} {label!r} from {path}: {exc}") from exc
    return module


def _import(module_name: str, label: str, what: str) -> ModuleType:
    if module_name.endswith(".py") or "/" in module_name or os.sep in module_name:
        return _from_file(Path(module_name), label, what)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = module_name.split(".")[0]
        here = Path.cwd()
        if exc.name == top and ((here / f"{top}.py").is_file() or (here / top).is_dir()) \
                and str(here) not in sys.path:
            sys.path.insert(0, str(here))  # the current directory, as `python -m` would
            return _import(module_name, label, what)
        raise BackendError(f"cannot import {what} {label!r}: {exc}; {_not_importable(module_name)}"
                           ) from exc
    except ImportError as exc:
        raise BackendError(f"cannot import {what} {label!r}: {exc}") from exc


def _not_importable(module_name: str) -> str:
    """The next step for a module that does not import: install the library a wrapped name
    needs, or a registered backend the name resembles, else how to make a module importable."""
    if module_name in COMPAT_WRAPPED:
        return (f"install {module_name.split('.')[0]}, then use array_api_compat's namespace for "
                f"it: --backend {COMPAT_WRAPPED[module_name]}")
    if "." not in module_name:
        close = difflib.get_close_matches(module_name, registered_backends(), n=3)
        if close:
            return f"did you mean {' or '.join(repr(c) for c in close)}? ({IMPORTABLE})"
    return IMPORTABLE


def load_object(target: str, what: str = "backend") -> object:
    """What ``module:attr`` (or ``path/to/file.py:attr``) names; a module when no attr."""
    module_name, colon, attr = target.rpartition(":") if ":" in target else (target, "", "")
    module = _import(module_name, target, what)
    if not colon:
        return module
    obj: object = module
    for part in attr.split("."):  # Class.method too
        try:
            obj = getattr(obj, part)
        except AttributeError:
            close = difflib.get_close_matches(part, [n for n in dir(obj) if not n.startswith("_")],
                                              n=3)
            hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise BackendError(f"{target!r}: module {module_name!r} has no {attr!r}{hint}"
                               ) from None
    return obj


def get_backend(name: str | Backend) -> Backend:
    """Resolve a backend from a registered name, a namespace module path, ``module:attr`` or
    ``path/to/file.py:attr`` (a module in the current directory imports too)."""
    if isinstance(name, Backend):
        return name
    registered = registered_backends()
    if name.startswith(PEER_PREFIX) and name not in registered:
        peers = sorted(n for n in registered if n.startswith(PEER_PREFIX))
        close = difflib.get_close_matches(name, peers, n=1)
        raise BackendError(f"no peer adapter {name!r}" + (f"; did you mean {close[0]!r}?" if close
                                                           else "") + f" (peers: {', '.join(peers)})")
    return _from_object(name, load_object(registered.get(name, name)))


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
