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


def __getattr__(name: str) -> Any:
    if name.startswith("_"):
        # `from .. import _xp` inside an encoding module asks here before importing the
        # submodule: listing the encodings now would import them half-initialised
        raise AttributeError(f"module 'posenc' has no attribute {name!r}")
    from .encodings import public_functions

    functions = public_functions()
    if name in functions:
        return functions[name]
    raise AttributeError(f"module 'posenc' has no attribute {name!r}")


def __dir__() -> list[str]:
    from .encodings import public_functions

    return sorted({*globals(), *public_functions()})
