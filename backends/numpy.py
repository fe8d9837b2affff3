"""NumPy backend (through array-api-compat's NumPy namespace)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from .backend import Backend
from .convenience import bind_module


def _load() -> ModuleType:
    import array_api_compat.numpy as xp

    return xp


def _from_numpy(array: np.ndarray, dtype: str, device: Any) -> np.ndarray:
    return np.asarray(array, dtype=dtype)


BACKEND = Backend(
    name="numpy", load=_load, to_numpy=lambda x: np.array(x, copy=True), from_numpy=_from_numpy,
    dtypes=("float64", "float32", "float16"))

__getattr__, __dir__ = bind_module(BACKEND)
