"""Array-API implementations, one module per encoding id, each listing its public functions in
``__all__``. They are written once against the array API standard (the namespace comes from the
inputs), vectorised, free of Python branching on array values, and run under array-api-strict.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from functools import cache
from typing import Any


@cache
def public_functions() -> dict[str, Callable[..., Any]]:
    """Every public implementation function, by name."""
    from .. import native

    native.load_imported()  # now, before a caller's tracer (see posenc.native)
    found: dict[str, Callable[..., Any]] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name in getattr(module, "__all__", ()):
            if name in found:
                raise RuntimeError(f"posenc.encodings: {name!r} is defined twice")
            found[name] = getattr(module, name)
    return found
