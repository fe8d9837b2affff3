"""posenc: reference specification and conformance suite for Transformer positional encodings.

The encoding functions (``posenc.rope``, ``posenc.sinusoidal``, ...) dispatch on the array
library of their inputs. ``from posenc.backends import torch as pe`` gives the same functions
defaulting to one framework. Importing posenc imports no framework.
"""

from __future__ import annotations

from typing import Any

from .errors import (
    BackendError,
    GoldenError,
    MissingFrameworkError,
    MixedArrayLibrariesError,
    ParameterError,
    PosencError,
    PositionOutOfRangeError,
    SpecError,
    Unsupported,
)

__version__ = "0.1.0"

__all__ = [
    "BackendError",
    "GoldenError",
    "MissingFrameworkError",
    "MixedArrayLibrariesError",
    "ParameterError",
    "PosencError",
    "PositionOutOfRangeError",
    "SpecError",
    "Unsupported",
    "__version__",
]


# Submodules of the core: `from .. import params` inside an encoding module asks __getattr__
# before importing the submodule, and listing the encodings then would import them
# half-initialised
_SUBMODULES = frozenset({"array_api", "params", "shapes", "rotary", "host_cache", "native",
                         "errors", "specs", "layers", "inputs", "paths", "golden", "catalog",
                         "diagnoses", "spec_nested", "encodings", "reference", "dialects",
                         "backends", "conformance", "plot", "validation"})


def __getattr__(name: str) -> Any:
    if name.startswith("_") or name in _SUBMODULES:
        raise AttributeError(f"module 'posenc' has no attribute {name!r}")
    from .encodings import public_functions

    functions = public_functions()
    if name in functions:
        return functions[name]
    raise AttributeError(f"module 'posenc' has no attribute {name!r}")


def __dir__() -> list[str]:
    from .encodings import public_functions

    return sorted({*globals(), *public_functions()})
