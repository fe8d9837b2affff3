"""Properties an encoding must satisfy, by name; one module per encoding (or family).

A property is ``fn(ctx: Context) -> None`` that raises :class:`CheckFailure` when the backend
violates it. It calls the encoding only through ``ctx`` (so eager and compiled modes, dtypes
and devices are covered) and does its arithmetic in float64 NumPy. Specs name the properties
that hold for them, with ``params`` (encoding parameters) and ``args`` (property arguments).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from functools import cache
from typing import Any

_REGISTRY: dict[str, Callable[[Any], None]] = {}


def register(name: str) -> Callable[[Callable[[Any], None]], Callable[[Any], None]]:
    def decorator(fn: Callable[[Any], None]) -> Callable[[Any], None]:
        if name in _REGISTRY:
            raise RuntimeError(f"property {name!r} registered twice")
        _REGISTRY[name] = fn
        return fn

    return decorator


@cache
def known_properties() -> dict[str, Callable[[Any], None]]:
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
    return dict(_REGISTRY)


def get_property(name: str) -> Callable[[Any], None]:
    return known_properties()[name]
