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
    q_len = size("q_len", q_len)
    k_len = size("k_len", k_len)
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
    float32_range("scale", value)
    return value


FLOAT32_MAX = 3.4028234663852886e38
FLOAT32_TINY = 1.1754943508222875e-38  # the smallest normal float32


def float32_range(name: str, value: Any) -> Any:
    """A positive scalar that float32 holds (not 0, not inf, not subnormal): JAX without x64,
    and every float32 computation, would turn it into 0 or inf."""
    # plain numbers only: a 0-d tensor would be a data-dependent branch under torch.compile
    if isinstance(value, int | float) and not FLOAT32_TINY <= value <= FLOAT32_MAX:
        raise ParameterError(f"{name}={value!r} is outside float32's range [{FLOAT32_TINY:.3g}, "
                             f"{FLOAT32_MAX:.3g}], where float32 computations hold it")
    return value


def bias_entries(heads: int, q_len: int, k_len: int) -> None:
    """Refuse a ``[heads, q_len, k_len]`` bias past :data:`MAX_ELEMENTS`, naming the lengths."""
    bounded(f"q_len={q_len}, k_len", k_len, heads * q_len * k_len,
            what=f"the [{heads}, {q_len}, {k_len}] bias")


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


def number(name: str, value: Any, *, minimum: float | None = None,
           exclusive_minimum: float | None = None) -> float:
    """A finite real number (an int, a float or a NumPy scalar, not a bool or a string), at
    least ``minimum`` / above ``exclusive_minimum`` when given."""
    if isinstance(value, bool) or not isinstance(value, int | float | _np_integer()
                                                 | _np_floating()):
        raise ParameterError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    if not -math.inf < value < math.inf:
        raise ParameterError(f"{name}={value!r} must be a finite number")
    if minimum is not None and value < minimum:
        raise ParameterError(f"{name}={value!r} must be >= {minimum}")
    if exclusive_minimum is not None and value <= exclusive_minimum:
        raise ParameterError(f"{name}={value!r} must be > {exclusive_minimum}")
    return float(value)


def mapping(name: str, value: Any, *, optional: bool = False) -> Any:
    """A dict (any Mapping; None too when ``optional``) whose numbers, at any depth, are
    finite: a NaN or an infinity in a config is refused naming its key."""
    from collections.abc import Mapping

    if value is None and optional:
        return value
    if not isinstance(value, Mapping):
        raise ParameterError(f"{name}={value!r} must be a dict ({type(value).__name__})")
    for key, item in value.items():
        where = f"{name}[{key!r}]"
        if isinstance(item, Mapping):
            mapping(where, item)
        elif isinstance(item, float | _np_floating()) and not -math.inf < item < math.inf:
            raise ParameterError(f"{where}={item!r} must be a finite number")
    return value


# The largest array a size parameter may ask for, in elements: 2**31 (8 GiB of float32,
# 16 GiB of float64). Past it a call is refused before allocating, with the size it would take.
MAX_ELEMENTS = 2**31


def bounded(name: str, value: Any, elements: int, *, what: str = "the result",
            limit: int = MAX_ELEMENTS) -> None:
    """Refuse ``name=value`` when it makes ``what`` hold more than ``limit`` elements
    (``elements``: how many it would hold), stating the size before anything is allocated."""
    if elements > limit:
        raise ParameterError(
            f"{name}={value!r} makes {what} {elements:,} elements ({_gib(elements * 8)} as "
            f"float64), past posenc's bound of {limit:,} elements")


# The largest feature width (a head, a model dimension, a number of heads or buckets): host-side
# loops run over them, so a width is refused past it rather than looped over for minutes.
MAX_WIDTH = 2**20


def size(name: str, value: Any, *, minimum: int | None = 0, maximum: int = MAX_ELEMENTS) -> int:
    """A size (a length, a count of positions, rows or steps): an int in
    ``[minimum, maximum)``; past ``maximum`` (2**31 by default: posenc's bound on an array)
    the error states the bound."""
    value = integer(name, value, minimum=minimum)
    if value >= maximum:
        raise ParameterError(f"{name}={value} must be < {maximum:,} (posenc's bound on a "
                             f"{'width' if maximum == MAX_WIDTH else 'size'})")
    return value


def width(name: str, value: Any, *, minimum: int = 1) -> int:
    """A feature width or a count of heads: :func:`size` below :data:`MAX_WIDTH`."""
    return size(name, value, minimum=minimum, maximum=MAX_WIDTH)


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:,.1f} GiB"


def option(kind: str, *, minimum: float | None = None, exclusive_minimum: float | None = None
           ) -> Any:
    """An argparse ``type=`` for a numeric command-line option: ``kind`` ``"int"`` or
    ``"float"`` (finite), at least ``minimum`` / above ``exclusive_minimum``. A bad value is a
    usage error (exit 2) naming the option and the value."""
    import argparse

    def parse(text: str) -> int | float:
        try:
            value: int | float = int(text) if kind == "int" else float(text)
        except ValueError:
            what = "an int" if kind == "int" else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not -math.inf < value < math.inf:
            raise argparse.ArgumentTypeError(f"{text!r} must be a finite number")
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"{text} must be >= {minimum:g}")
        if exclusive_minimum is not None and value <= exclusive_minimum:
            raise argparse.ArgumentTypeError(f"{text} must be > {exclusive_minimum:g}")
        return value

    parse.__name__ = kind  # argparse words an error without a message with the type's name
    parse.minimum = minimum  # type: ignore[attr-defined]  # read by tests/backends/test_hostile_inputs.py
    parse.exclusive_minimum = exclusive_minimum  # type: ignore[attr-defined]
    return parse


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
