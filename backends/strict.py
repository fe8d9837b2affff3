"""array-api-strict backend: proves the implementations use nothing outside the standard."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from .backend import Backend, numpy_from_dlpack
from .convenience import bind_module


def _load() -> ModuleType:
    import array_api_strict as xp

    return xp


def _from_numpy(array: np.ndarray, dtype: str, device: Any) -> Any:
    xp = _load()
    return xp.asarray(array, dtype=getattr(xp, dtype))


BACKEND = Backend(
    name="strict", load=_load, to_numpy=numpy_from_dlpack, from_numpy=_from_numpy,
    dtypes=("float64", "float32"), requires="array_api_strict", extra="strict")

__getattr__, __dir__ = bind_module(BACKEND)
