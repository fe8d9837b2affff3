"""Finding the array namespace of the inputs, without importing any framework that is not in use.

Detection goes by the module that defines an array's type (as einops does), so ``import
posenc`` imports no framework: a torch tensor can only exist once torch has been imported.
What differs between frameworks is asked of their :mod:`posenc.native` plugin.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from . import native
from .errors import MixedArrayLibrariesError, ParameterError, PositionOutOfRangeError

# A plain list rather than a ContextVar: torch.compile cannot trace ContextVar.get, and reading a
# module global is free to guard on. Only the (single-threaded) harness pushes onto it.
_FORCED: list[ModuleType] = []

_PLAIN = (int, float, bool, complex, list, tuple)


@contextlib.contextmanager
def use_namespace(xp: ModuleType) -> Iterator[None]:
    """Run the implementations with ``xp`` as the namespace (used for module backends)."""
    _FORCED.append(xp)
    try:
        yield
    finally:
        _FORCED.pop()


def library_of(array: Any) -> str:
    """The library of ``array``: 'numpy', 'torch', 'jax', ... (see posenc.native.library_of)."""
    return native.library_of(array)


def _namespace_for(library: str, array: Any) -> ModuleType:
    if library == "numpy":
        import array_api_compat.numpy as xp

        return xp
    xp = native.for_library(library).namespace()
    if xp is not None:
        return xp
    if library == "array_api_strict":
        import array_api_strict as xp

        return xp
    if hasattr(array, "__array_namespace__"):
        return array.__array_namespace__()
    raise ParameterError(
        f"arrays of type {type(array).__module__}.{type(array).__qualname__} are not supported: "
        "pass NumPy, PyTorch, JAX, TensorFlow or any array-API-compatible arrays")


def namespace(**arrays: Any) -> ModuleType:
    """The namespace shared by the named array arguments (``None`` and Python values skipped).

    Raises :class:`MixedArrayLibrariesError` naming the arguments when they come from
    different array libraries.
    """
    seen: dict[str, tuple[str, Any]] = {}
    for name, value in arrays.items():
        if value is None or isinstance(value, _PLAIN):
            continue
        seen.setdefault(library_of(value), (name, value))
    if len(seen) > 1:
        described = ", ".join(f"{name} is a {lib} array" for lib, (name, _) in seen.items())
        raise MixedArrayLibrariesError(
            f"all array arguments must come from one array library, but {described}; "
            "convert them first (e.g. with the matching posenc.backends module)")
    if _FORCED:
        return _FORCED[-1]
    if not seen:
        return _namespace_for("numpy", None)
    ((library, (name, value)),) = seen.items()
    try:
        return _namespace_for(library, value)
    except ParameterError as exc:
        raise ParameterError(f"{name}: {exc}") from None


def namespace_of_dtype(dtype: Any) -> ModuleType:
    """The namespace a function without array inputs builds its result in: the library that
    defines ``dtype`` (``torch.float32`` -> torch), NumPy for None."""
    if _FORCED:
        return _FORCED[-1]
    if dtype is None:
        return _namespace_for("numpy", None)
    if isinstance(dtype, str):
        raise ParameterError(
            f"dtype={dtype!r} is a name: pass a dtype object such as torch.float32 (the "
            "posenc.backends.<framework> functions accept names)")
    top = (dtype if isinstance(dtype, type) else type(dtype)).__module__.split(".")[0]
    library = native.for_library(top).library or _DTYPE_LIBRARIES.get(top, top)
    try:
        return _namespace_for(library, dtype)
    except ParameterError:
        raise ParameterError(f"dtype={dtype!r} is not a dtype of a supported array library "
                             "(NumPy, PyTorch, JAX, TensorFlow or an array-API namespace)") from None


# NumPy's extension dtypes (bfloat16, ...) live in ml_dtypes
_DTYPE_LIBRARIES = {"ml_dtypes": "numpy"}


def output_dtype(xp: ModuleType, dtype: Any, *, of: str | None = None) -> Any:
    """``dtype`` (float32 when None), checked to be a real floating dtype of ``xp``; ``of``
    names the array inputs whose library ``xp`` is, for the error."""
    out = xp.float32 if dtype is None else dtype
    foreign = False
    try:
        floating = xp.isdtype(out, "real floating")
    except Exception:  # not a dtype of this namespace at all
        floating, foreign = False, True
    if not floating:
        where = f" of {of}'s array library" if of and foreign else ""
        raise ParameterError(f"dtype must be a real floating dtype{where}, got {dtype!r}")
    return out


def device_of(x: Any) -> Any:
    """The device of ``x``, or None where it cannot be told (e.g. a tracer)."""
    return native.of(x).device_of(x)


def arange(xp: ModuleType, start: int, stop: int, device: Any = None) -> Any:
    """Integer positions ``start .. stop - 1`` in the namespace's default integer dtype (exact,
    unlike float32), on ``device`` when one is given."""
    if device is None:
        return xp.arange(start, stop)
    return xp.arange(start, stop, device=device)


def asarray(xp: ModuleType, value: Any, *, dtype: Any = None, device: Any = None) -> Any:
    """``xp.asarray`` that passes ``device`` only when it is known."""
    if device is None:
        return xp.asarray(value, dtype=dtype)
    return xp.asarray(value, dtype=dtype, device=device)


def is_traced(x: Any) -> bool:
    """True when ``x``'s values cannot be read now (inside jax.jit, torch.compile, tf.function)."""
    return native.of(x).is_traced(x)


def dtype_name(dtype: Any) -> str:
    """'float32', 'bfloat16', 'int64', ... for a dtype of any supported library."""
    name = getattr(dtype, "name", None) or str(dtype)
    return name.removeprefix("<dtype: '").removesuffix("'>").rsplit(".", 1)[-1]


def check_floating(xp: ModuleType, name: str, x: Any) -> None:
    if not xp.isdtype(x.dtype, "real floating"):
        raise ParameterError(f"{name} must have a real floating dtype, got {dtype_name(x.dtype)}")


def check_positions_dtype(xp: ModuleType, positions: Any) -> None:
    """Positions must be exact: integers, or floats of at least 32 bits."""
    if xp.isdtype(positions.dtype, "integral"):
        return
    if xp.isdtype(positions.dtype, "real floating") and dtype_name(positions.dtype) in (
            "float32", "float64"):
        return
    raise ParameterError(
        f"positions must have an integer dtype (or float32/float64), got "
        f"{dtype_name(positions.dtype)}: low-precision positions are not exact")


def compute_dtype(xp: ModuleType, dtype: Any) -> Any:
    """Angles and trigonometry run in float64 for float64 results, float32 otherwise."""
    return xp.float64 if dtype == xp.float64 else xp.float32


FLOAT32_EXACT_INTEGERS = 2**24
FLOAT64_EXACT_INTEGERS = 2**53


def check_position_range(
    xp: ModuleType, positions: Any, *, compute: Any, name: str = "positions",
    low: int | None = None, high: int | None = None,
) -> tuple[float, float] | None:
    """Eager-mode range check (skipped when traced): finite, within [low, high) and exact in
    ``compute``. Returns ``(min, max)`` of the positions (None when traced or empty)."""
    if is_traced(positions) or math.prod(tuple(positions.shape)) == 0:
        return None
    floating = xp.isdtype(positions.dtype, "real floating")
    extrema = native.of(positions).position_extrema(positions, floating)
    if extrema is None:
        extrema = position_extrema(xp, positions, floating)
    # one device-to-host transfer (a GPU array would sync twice with two int() calls)
    if hasattr(extrema, "tolist"):
        values = extrema.tolist()
    elif hasattr(extrema, "numpy"):  # TensorFlow: one read, not an eager slice per value
        values = extrema.numpy().tolist()
    else:
        values = [extrema[i] for i in range(3 if floating else 2)]
    if floating:
        lo, hi, bad = (float(v) for v in values)
        if bad:
            value = next((v for v in (lo, hi) if not math.isfinite(v)), "NaN or inf")
            raise ParameterError(f"{name} contains {value}: positions must be finite")
    else:
        lo, hi = (int(v) for v in values)
    if low is not None and lo < low:
        raise_out_of_range(name, lo, low, high)
    if high is not None and hi >= high:
        raise_out_of_range(name, hi, low, high)
    value = hi if abs(hi) >= abs(lo) else lo
    if compute == xp.float32 and abs(value) > FLOAT32_EXACT_INTEGERS:
        raise ParameterError(
            f"{name} contains {value}, beyond 2**24 = {FLOAT32_EXACT_INTEGERS}, the largest "
            "integer float32 angles represent exactly: pass float64 inputs for such positions")
    if compute == xp.float64 and abs(value) > FLOAT64_EXACT_INTEGERS:
        raise ParameterError(
            f"{name} contains {value}, beyond 2**53 = {FLOAT64_EXACT_INTEGERS}, the largest "
            "integer float64 represents exactly")
    return lo, hi


def position_extrema(xp: ModuleType, positions: Any, floating: bool) -> Any:
    """``[min, max]`` of the positions, and for floats a third entry, 1 when a position is NaN
    or infinite (min/max may skip NaN)."""
    parts = [xp.min(positions), xp.max(positions)]
    if floating:
        parts.append(xp.astype(xp.any(~xp.isfinite(positions)), positions.dtype))
    return xp.stack(parts)


def assert_position_range(
    xp: ModuleType, positions: Any, *, compute: Any, name: str = "positions",
    low: int | None = None, high: int | None = None,
) -> None:
    """:func:`check_position_range` without reading values back on the hot path where the
    library can check on its device (torch eager: ``torch._assert_async``, an error naming the
    parameter; on CPU the host check then raises the error naming the value)."""
    if is_traced(positions) or math.prod(tuple(positions.shape)) == 0 or \
            not native.of(positions).assert_position_range(
                positions, compute=compute, name=name, low=low, high=high):
        check_position_range(xp, positions, compute=compute, name=name, low=low, high=high)


def raise_out_of_range(name: str, value: int, low: int | None, high: int | None) -> None:
    lo = "-inf" if low is None else str(low)
    hi = "inf" if high is None else str(high)
    raise PositionOutOfRangeError(f"{name} contains {value}, outside the valid range [{lo}, {hi})")


def at_least_int32(xp: ModuleType, values: Any) -> Any:
    """Integer ``values`` as int32 when their dtype is narrower (int8/int16/uint8/uint16): the
    values are unchanged, arithmetic on them cannot wrap at the narrow dtype's limits, and
    every backend's ``take`` and ``searchsorted`` accept them (torch's index_select wants
    int32 or int64, TensorFlow's gather int16 or wider signed)."""
    if int(xp.iinfo(values.dtype).max) < 2**31 - 1:
        return xp.astype(values, xp.int32)
    return values


def table_and_positions(xp: ModuleType, positions: Any, table: Any, *,
                        table_shape: str) -> tuple[Any, int, int]:
    """Validate the inputs of a row lookup: a floating 2-D table with at least one row and
    integer positions (lists converted). Returns ``(positions, rows, dim)``."""
    if not hasattr(table, "dtype"):
        raise ParameterError(f"table must be an array, got {type(table).__name__}")
    if positions is None:
        raise ParameterError("positions must be an array of row indices, got None")
    if not hasattr(positions, "dtype"):
        positions = asarray(xp, positions, device=device_of(table))
    if table.ndim != 2:
        raise ParameterError(
            f"table must have shape {table_shape}, got shape {tuple(table.shape)}")
    check_floating(xp, "table", table)
    if not xp.isdtype(positions.dtype, "integral"):
        raise ParameterError(
            f"positions must have an integer dtype, got {dtype_name(positions.dtype)}")
    rows, dim = int(table.shape[0]), int(table.shape[1])
    if rows == 0:
        raise ParameterError("table has 0 rows: there is no position to look up")
    return positions, rows, dim
