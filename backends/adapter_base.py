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


MISSING = object()  # a key a parameter value does not hold


def lookup(params: Mapping[str, Any], key: str) -> Any:
    """The value of ``key`` in ``params`` (:data:`MISSING` if absent): a parameter name, a
    dotted path into a dict (``scaling.rope_type``, which also reads the legacy ``type``), or
    ``rope_type`` alone, looked up at any depth (in ``scaling``)."""
    alias = key == "rope_type" and "type" in params
    if "." not in key and key not in params and not alias:
        for value in params.values():
            if isinstance(value, Mapping) and (found := lookup(value, key)) is not MISSING:
                return found
        return MISSING
    value: Any = params
    for part in key.split("."):
        if not isinstance(value, Mapping):
            return MISSING
        if part not in value and part == "rope_type" and "type" in value:
            part = "type"
        value = value.get(part, MISSING)
    return value


def unsupported_values(unsupported: Mapping[str, Any] | None, known: Iterable[str],
                       what: str, inputs: Iterable[str] = ()) -> dict[str, Any]:
    """``unsupported`` checked: a rule's key -> a value, a list or set of values, or ``ANY``.
    A key is a posenc parameter (``base``), a dotted path into one (``scaling.rope_type``),
    ``rope_type`` (at any depth), or an input's number of axes (``positions.ndim``); any other
    key is a ParameterError naming it."""
    known, inputs = list(known), list(inputs)
    out: dict[str, Any] = {}
    for key, value in (unsupported or {}).items():
        head, _, rest = str(key).partition(".")
        ok = (head in known or (head == "rope_type" and not rest and "scaling" in known)
              or (head in inputs and rest == "ndim"))
        if not ok:
            inputs_text = "".join(f", {i}.ndim" for i in inputs)
            raise ParameterError(f"unsupported: {key!r} is not a parameter of {what} (known: "
                                 f"{', '.join(known)}{inputs_text}; a dotted key looks into a "
                                 "dict parameter, e.g. 'scaling.rope_type')")
        out[key] = value if value == ANY or isinstance(value, list | tuple | set | frozenset) \
            else [value]
    return out


def _ndim_rules(unsupported: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in unsupported.items() if k.endswith(".ndim")}


def declared_out_of_scope(params: Mapping[str, Any], unsupported: Mapping[str, Any],
                          defaults: Mapping[str, Any]) -> str | None:
    """The reason ``params`` hit a value declared unsupported, or None. Decided on the
    effective values: a parameter a check leaves out has the spec's default, and a
    declaration of the default holds there too. Input rules (``positions.ndim``) are
    decided by :func:`declared_inputs_out_of_scope` at the call."""
    effective = {**defaults, **params}
    for key, values in unsupported.items():
        value = lookup(effective, key)  # MISSING for input rules (positions.ndim)
        if value is MISSING:
            continue
        default = lookup(defaults, key)
        if (value != default and value is not None) if values == ANY \
                else any(_same(value, v) for v in values):
            return f"{key}={short(value)} is declared unsupported"
    return None


def declared_inputs_out_of_scope(values: Mapping[str, Any], unsupported: Mapping[str, Any]
                                 ) -> str | None:
    """The reason an input's number of axes is declared unsupported (``positions.ndim=2``)."""
    for key, rule in _ndim_rules(unsupported).items():
        name = key.split(".")[0]
        array = values.get(name)
        if array is None or not hasattr(array, "shape"):
            continue
        ndim = len(array.shape)
        if rule != ANY and any(_same(ndim, v) for v in rule):
            return f"{key}={ndim} is declared unsupported ({name} of shape {list(array.shape)})"
    return None


def _same(value: Any, declared: Any) -> bool:
    if isinstance(value, bool) or isinstance(declared, bool):
        return value is declared
    return bool(value == declared)


def fixed_values(parameters: Mapping[str, Any], unsupported: Mapping[str, Any],
                 defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Parameters whose default is declared unsupported and whose spec enumerates one other
    value: the value a function that does not take the parameter is fixed at
    (``unsupported={"layout": "half"}`` on a function without ``layout``: interleaved)."""
    out: dict[str, Any] = {}
    for key, values in unsupported.items():
        decl = parameters.get(key)
        if not isinstance(decl, Mapping) or "enum" not in decl or values == ANY:
            continue
        if not any(_same(defaults.get(key), v) for v in values):
            continue
        left = [e for e in decl["enum"] if not any(_same(e, v) for v in values)]
        if len(left) == 1:
            out[key] = left[0]
    return out


def check_pairing(layout: str, unsupported: Mapping[str, Any], label: str) -> None:
    """A ParameterError when the pairing an adapter declares (``layout=``) is also declared
    unsupported: the declaration contradicts itself."""
    values = unsupported.get("layout")
    if values is None:
        return
    if (layout != "half") if values == ANY else any(_same(layout, v) for v in values):
        raise ParameterError(f"{label}: layout={layout!r} is declared as its pairing and also "
                             f"unsupported (unsupported={{'layout': {values!r}}}): declare the "
                             "pairing it computes with layout= alone")


def refused(exc: BaseException, params: Mapping[str, Any]) -> str | None:
    """Why a ``KeyError`` the implementation raised is its refusal of a parameter value it
    lacks (the missing key is a string value of the call, such as a rope type), with how to
    declare it; None when the key is no value of the call (then it is the code's error)."""
    if not isinstance(exc, KeyError) or len(exc.args) != 1 or not isinstance(exc.args[0], str):
        return None
    missing = exc.args[0]

    def paths(value: Any, prefix: str) -> list[str]:
        if isinstance(value, Mapping):
            return [p for k, v in value.items() for p in paths(v, f"{prefix}.{k}" if prefix
                                                                else str(k))]
        return [prefix] if isinstance(value, str) and value == missing else []

    found = paths(dict(params), "")
    if not found:
        return None
    path = found[0].replace(".type", ".rope_type") if found[0].endswith(".type") else found[0]
    return (f"unsupported by the implementation: KeyError {missing!r} ({path}={missing!r}); "
            f"declare it: unsupported={{{path!r}: {missing!r}}} (--unsupported "
            f"{path}={missing})")


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
                device: Any = None, any_shape: bool = False, any_dtype: bool = False) -> Any:
    """``value`` if it is an array of ``like``'s library (shape, dtype and device as given, or
    as ``like``'s), else an :class:`AdapterOutputError` naming the adapter and what it got."""
    expected_dtype = dtype if dtype is not None or any_dtype else getattr(like, "dtype", None)
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


# What an adapter's override declares to the harness (read by conformance.scope): what posenc
# supplies it, the diagnoses that supply explains, the pairing and the position conventions
# it converts. Attached when the adapter is built, never during a call: a compiler
# (torch.compile fullgraph) refuses a setattr on a function inside the traced call.
DECLARED = ("posenc_supplies", "posenc_explains", "posenc_pairing", "posenc_conventions")


def declare(wrapped: Callable[..., Any], inner: Callable[..., Any] | None = None,
            **declared: Any) -> Callable[..., Any]:
    """``wrapped`` declaring what ``inner`` (the override it wraps) declares, then
    ``declared`` (``pairing=``, ``conventions=``, ``supplies=``, ``explains=``; a ``supplies``
    that varies per call is a zero-argument callable, read after the call)."""
    for name in DECLARED:
        if inner is not None and hasattr(inner, name):
            setattr(wrapped, name, getattr(inner, name))
    for key, value in declared.items():
        name = f"posenc_{key}"
        if name not in DECLARED:
            raise TypeError(f"declare: {key}= is none of {', '.join(DECLARED)}")
        setattr(wrapped, name, value)
    return wrapped
