"""Calling posenc's own implementation of an encoding on NumPy arrays, for the pictures."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import ParameterError
from ..specs import Spec

_CONVERT = {"float": np.float64, "int": np.int64, "bool": np.bool_}


def call(spec: Spec, arrays: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> Any:
    """``spec.function`` of the NumPy backend on ``arrays`` (by input name) in float64.

    Returns a NumPy array, or a tuple of them (a scalar factor stays a float).
    """
    from posenc.backends import get_backend

    backend = get_backend("numpy")
    missing = [name for name, decl in spec.parameters.items()
               if decl.get("required") and name not in params]
    if missing:
        raise ParameterError(f"{spec.id}: the plot needs a value for {', '.join(missing)} "
                             f"(--param {missing[0]}=...)")
    kinds = {decl.name: decl.kind for decl in spec.inputs}
    converted = {name: np.asarray(value, dtype=_CONVERT[kinds[name]])
                 for name, value in arrays.items()}
    if spec.dtype_parameter:
        params = {**params, "dtype": backend.dtype("float64")}
    out = backend.function(spec.function)(**converted, **params)
    if isinstance(out, tuple | list):
        return tuple(part if isinstance(part, int | float) else np.asarray(part) for part in out)
    return np.asarray(out)
