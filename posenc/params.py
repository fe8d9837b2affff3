"""Validation of scalar parameters: every error names the parameter and the value."""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

from .errors import ParameterError


def choice(name: str, value: Any, choices: Sequence[Any]) -> Any:
    if value not in choices:
        raise ParameterError(
            f"{name}={value!r} is not one of {', '.join(repr(c) for c in choices)}")
    return value


def integer(name: str, value: Any, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int | _np_integer()):
        raise ParameterError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ParameterError(f"{name}={value} must be >= {minimum}")
    return value


def count(name: str, value: Any, *, minimum: int = 1, must_be: str = "a positive int") -> int:
    """An integer of at least ``minimum``: an int or anything with ``__index__`` (NumPy
    integers, 0-d integer arrays), not a bool. ``must_be`` words the requirement in the error."""
    if isinstance(value, bool):
        raise ParameterError(f"{name}={value!r} must be {must_be}")
    try:
        number = operator.index(value)
    except TypeError:
        raise ParameterError(f"{name}={value!r} must be {must_be}") from None
    if number < minimum:
        raise ParameterError(f"{name}={number} must be {must_be}")
    return number


def query_lengths(q_len: Any, k_len: Any) -> tuple[int, int]:
    """``(q_len, k_len)`` for queries aligned to the end of the keys (a KV cache): the queries are
    the last ``q_len`` of the ``k_len`` positions, so ``q_len <= k_len``."""
    q_len = integer("q_len", q_len, minimum=0)
    k_len = integer("k_len", k_len, minimum=0)
    if q_len > k_len:
        raise ParameterError(
            f"q_len={q_len} must be <= k_len={k_len}: queries are the last q_len of the k_len "
            "positions")
    return q_len, k_len


def flag(name: str, value: Any) -> bool:
    """A switch: a bool (NumPy's too), never a truthy stand-in such as ``"no"`` or ``1``."""
    if not isinstance(value, bool | _np_bool()):
        raise ParameterError(f"{name} must be a bool, got {value!r} ({type(value).__name__})")
    return bool(value)


def positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | _np_integer()
                                                 | _np_floating()):
        raise ParameterError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    # comparisons rather than math.isfinite: torch.compile traces float parameters symbolically
    if not 0 < value < math.inf:
        raise ParameterError(f"{name}={value!r} must be a finite number > 0")
    return float(value)


def scale(value: Any) -> Any:
    """An optional attention scale: None, or a finite number > 0 (a 0-d array too: layers
    may hold it as a tensor)."""
    try:
        ok = value is None or (not isinstance(value, bool | str) and 0 < value < math.inf)
    except TypeError:  # a list, a dict, ...
        ok = False
    if not ok:
        raise ParameterError(f"scale={value!r} must be a finite number > 0 (or None)")
    return value


def default_scale(value: Any, q_shape: tuple[int, ...], *, factor: int = 1,
                  rule: str = "1/sqrt(d)") -> float:
    """The attention scale: ``value`` (checked by :func:`scale`), or ``1/sqrt(d * factor)``
    for queries of shape ``q_shape`` (``d`` its last dim; ``rule`` says the formula). With
    ``d = 0`` there is no default: the caller must pass a scale (the scores are then 0)."""
    if scale(value) is not None:
        return float(value)
    d = int(q_shape[-1])
    if d == 0:
        raise ParameterError(
            f"q has shape {tuple(q_shape)}: its last dim d = 0 has no default scale {rule}; "
            "pass scale explicitly (the scores are then all 0)")
    return 1.0 / math.sqrt(d * factor)


def base(value: Any) -> float:
    """A frequency base: finite and > 1 (base 1 makes every frequency 1)."""
    value = positive("base", value)
    if value <= 1:
        raise ParameterError(f"base={value!r} must be > 1")
    return value


def _np_integer() -> type:
    import numpy as np

    return np.integer


def _np_floating() -> type:
    import numpy as np

    return np.floating


def _np_bool() -> type:
    import numpy as np

    return np.bool_
