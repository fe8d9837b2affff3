"""What every adapter shares: the :class:`Adapter` record, the user function's signature, the
check of what it returned, and turning adapters into a :class:`Backend`.

An adapter wraps ONE function with its own signature (someone's ``apply_rotary_pos_emb``, a
bucket function, a frequency function) as an override with posenc's signature for one
encoding function. The constructors live in :mod:`posenc.backends.adapters`.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from posenc import array_api
from posenc.errors import ParameterError, PosencError, Unsupported

from .backend import Backend

ANY = "*"  # in ``unsupported``: every value but the default


class AdapterOutputError(PosencError):
    """An adapted function returned something of the wrong kind, shape, dtype or device."""


@dataclass(frozen=True)
class Adapter:
    """One user function as the override of posenc's encoding function ``function``.

    ``call`` has posenc's signature; ``scope(params)`` returns why a call's parameters are
    outside what the function implements (None: in scope); ``framework`` is the backend the
    arrays come from (None: inferred by :func:`as_backend`); ``dtypes`` those it is checked in
    (None: the framework's); ``supplies`` says what posenc computes for it (e.g. cos/sin), and
    ``probe`` calls it once on a golden case (for inferring the framework from its result).
    """

    function: str
    call: Callable[..., Any]
    label: str
    scope: Callable[[dict[str, Any]], str | None] | None = None
    framework: str | None = None
    dtypes: tuple[str, ...] | None = None
    supplies: str | None = None
    probe: Callable[[], Any] | None = None

    def backend(self, **kwargs: Any) -> Backend:
        """This adapter alone as a Backend (see :func:`as_backend`)."""
        return as_backend(self, **kwargs)


def label_of(fn: Any) -> str:
    """A function's qualified name (``T5Attention._relative_position_bucket``), for messages."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    return str(name).rsplit("<locals>.", 1)[-1] if name else type(fn).__name__


class Signature:
    """The parameters a user function accepts by keyword."""

    def __init__(self, fn: Callable[..., Any], label: str) -> None:
        self.label = label
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):  # no signature (some builtins): accept every name
            params = [inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)]
        named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        self.names = [p.name for p in params if p.kind in named]
        self.required = {p.name for p in params
                         if p.kind in named and p.default is inspect.Parameter.empty}
        self.var_keyword = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)

    def accepts(self, name: str) -> bool:
        return self.var_keyword or name in self.names

    def check_names(self, names: Mapping[str, str], known: Iterable[str], what: str) -> None:
        """``names`` (posenc name -> the function's name): every key a posenc name, every
        value a parameter of the function; else a ParameterError naming it."""
        known = list(known)
        for key, value in names.items():
            if key not in known:
                raise ParameterError(f"names: {key!r} is not a parameter of {what} "
                                     f"(known: {', '.join(known)})")
            if not isinstance(value, str) or not self.accepts(value):
                raise ParameterError(f"names: {key!r} -> {value!r}: {self.label} takes no "
                                     f"parameter {value!r} (it takes: {', '.join(self.names)})")


def unsupported_values(unsupported: Mapping[str, Any] | None, known: Iterable[str],
                       what: str) -> dict[str, Any]:
    """``unsupported`` checked: posenc parameter -> a value, a list of values, or ``ANY``."""
    known = list(known)
    out: dict[str, Any] = {}
    for key, value in (unsupported or {}).items():
        if key not in known:
            raise ParameterError(f"unsupported: {key!r} is not a parameter of {what} "
                                 f"(known: {', '.join(known)})")
        out[key] = value if value == ANY or isinstance(value, list | tuple | set) else [value]
    return out


def declared_out_of_scope(params: Mapping[str, Any], unsupported: Mapping[str, Any],
                          defaults: Mapping[str, Any]) -> str | None:
    for key, values in unsupported.items():
        if key not in params:
            continue
        value = params[key]
        if (value != defaults.get(key)) if values == ANY else any(value == v for v in values):
            return f"{key}={short(value)} is declared unsupported"
    return None


def short(value: Any) -> str:
    """A parameter value for a one-line reason (a scaling dict by its rope_type)."""
    if isinstance(value, Mapping):
        kind = value.get("rope_type", value.get("type"))
        return f"{{rope_type: {kind}, ...}}" if kind else "{...}"
    return repr(value)


def not_taken(key: str, value: Any) -> str:
    """The reason a parameter the function does not take is out of its scope."""
    return f"it takes no {key!r} ({key}={short(value)})"


# -- what the function returned ---------------------------------------------------------------
def describe(value: Any) -> str:
    """What a function returned, as a user reads it: 'torch float32[2, 8] on cpu'."""
    if isinstance(value, tuple | list):
        kinds = {type(v).__name__ for v in value}
        return f"a {type(value).__name__} of {len(value)} ({', '.join(sorted(kinds))})"
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        device = array_api.device_of(value) if array_api.library_of(value) != "numpy" else "cpu"
        shape = ", ".join(str(int(n)) for n in value.shape)
        return (f"{array_api.library_of(value)} {array_api.dtype_name(value.dtype)}[{shape}]"
                + (f" on {device}" if device is not None else ""))
    return f"{type(value).__name__} {value!r}"[:120]


def check_array(label: str, what: str, value: Any, *, like: Any = None,
                shape: tuple[int, ...] | None = None, dtype: Any = None,
                device: Any = None, any_shape: bool = False) -> Any:
    """``value`` if it is an array of ``like``'s library (shape, dtype and device as given, or
    as ``like``'s), else an :class:`AdapterOutputError` naming the adapter and what it got."""
    expected_dtype = dtype if dtype is not None else getattr(like, "dtype", None)
    expected_shape = shape if shape is not None or any_shape else (
        tuple(like.shape) if like is not None else None)
    expected_device = device if device is not None else (
        array_api.device_of(like) if like is not None else None)
    problems = []
    if not (hasattr(value, "shape") and hasattr(value, "dtype")):
        problems.append("not an array")
    else:
        if like is not None and array_api.library_of(value) != array_api.library_of(like):
            problems.append(f"a {array_api.library_of(value)} array, not {array_api.library_of(like)}")
        if expected_shape is not None and tuple(value.shape) != tuple(expected_shape):
            problems.append(f"shape {list(value.shape)}, expected {list(expected_shape)}")
        if expected_dtype is not None and (array_api.dtype_name(value.dtype)
                                           != array_api.dtype_name(expected_dtype)):
            problems.append(f"dtype {array_api.dtype_name(value.dtype)}, expected "
                            f"{array_api.dtype_name(expected_dtype)}")
        got_device = array_api.device_of(value)
        if expected_device is not None and got_device is not None and \
                str(got_device) != str(expected_device):
            problems.append(f"device {got_device}, expected {expected_device}")
    if problems:
        raise AdapterOutputError(f"{label} ({what} adapter) returned {describe(value)}: "
                                 + "; ".join(problems))
    return value


def to_numpy(value: Any) -> np.ndarray:
    """Any array (a CUDA tensor too) as NumPy, for posenc's host-side reference."""
    if hasattr(value, "detach"):
        value = value.detach().cpu()
    return np.asarray(value)


def dtype_out_of_scope(value: Any, dtype: Any) -> None:
    """A function that takes no dtype returns the one it computes in: another dtype asked of
    it is out of its scope (float32 by design is not judged in float64)."""
    if dtype is not None and hasattr(value, "dtype") and \
            array_api.dtype_name(value.dtype) != array_api.dtype_name(dtype):
        raise Unsupported(f"it returns {array_api.dtype_name(value.dtype)} and takes no dtype: "
                          f"{array_api.dtype_name(dtype)} is out of its scope")


def out_of_scope(reason: str | None) -> None:
    if reason:
        raise Unsupported(reason)


# -- adapters -> Backend ----------------------------------------------------------------------
def _framework_of(result: Any) -> str:
    first = result[0] if isinstance(result, tuple | list) and result else result
    if hasattr(first, "shape") and hasattr(first, "dtype"):
        return array_api.library_of(first)
    return "numpy"  # Python numbers or lists: host values


def _probe(adapter: Adapter) -> tuple[str, tuple[str, ...] | None]:
    """The framework and dtype of what the adapter returns on its first golden case in scope."""
    if adapter.probe is None:
        return "torch", None
    result = adapter.probe()
    first = result[0] if isinstance(result, tuple | list) and result else result
    framework = _framework_of(result)
    if framework == "numpy" and not (hasattr(first, "dtype") and hasattr(first, "shape")):
        return "numpy", None  # host values, converted to each dtype under test
    return framework, (array_api.dtype_name(first.dtype),)


def as_backend(*adapters: Adapter, name: str | None = None, framework: str | None = None,
               dtypes: Iterable[str] | None = None, compiled: bool = False) -> Backend:
    """A Backend whose overrides are the adapters' (one per encoding function), checked only on
    what they provide, with their scopes. ``framework`` (``torch``, ``jax``, ``numpy``, ...):
    the backend the arrays come from; by default the adapters' own, else inferred: ``torch``
    for functions that take arrays, else from what the function returns on a golden case
    (which also sets the dtypes of a function that takes no ``dtype``). ``dtypes``: those to
    check (default: what the adapters declare, within the framework's). ``compiled``: keep
    the framework's compile hook (default: eager only: someone else's function may not trace).
    """
    from . import get_backend

    if not adapters:
        raise ParameterError("as_backend: give at least one adapter")
    by_function: dict[str, Adapter] = {}
    for adapter in adapters:
        if adapter.function in by_function:
            raise ParameterError(f"two adapters for {adapter.function!r}: "
                                 f"{by_function[adapter.function].label} and {adapter.label}")
        by_function[adapter.function] = adapter
    declared = {a.framework for a in adapters if a.framework is not None}
    probed_dtypes: tuple[str, ...] | None = None
    if framework is None and len(declared) == 1:
        framework = declared.pop()
    elif framework is None and not declared:
        framework, probed_dtypes = _probe(adapters[0])
    elif framework is None:
        raise ParameterError(f"adapters of different frameworks {sorted(declared)}: give "
                             "framework=")
    base = get_backend(framework)
    allowed = [d for d in base.dtypes]
    for adapter in adapters:
        own = adapter.dtypes if adapter.dtypes is not None else probed_dtypes
        if own is not None:
            allowed = [d for d in allowed if d in own]
    if dtypes is not None:
        asked = list(dtypes)
        allowed = [d for d in asked if d in base.dtypes]

    def scope(function: str, params: dict[str, Any]) -> str | None:
        adapter = by_function.get(function)
        return adapter.scope(params) if adapter is not None and adapter.scope else None

    return dataclasses.replace(
        base, name=name or " + ".join(a.label for a in adapters),
        overrides={f: a.call for f, a in by_function.items()}, scope=scope,
        dtypes=tuple(allowed), compile=base.compile if compiled else None, own_code=False,
        expectations={})
