"""Adapters: ONE function with its own signature, checked as an override of posenc's.

Each constructor returns an :class:`Adapter`; ``adapter.backend()`` (or :func:`as_backend`
for several) makes the Backend the harness checks, and ``posenc.conformance.check`` runs it.

- :func:`function` (and :func:`rope_function`, :func:`bucket_function`,
  :func:`slopes_function`): a function taking posenc's inputs and parameters under its own
  names (``names={"base": "theta"}``); a parameter it does not take, or a value declared in
  ``unsupported``, is out of its scope when not the default;
- :func:`apply_rotary`: ``apply(q, k, cos, sin)``, posenc supplying cos/sin;
- :func:`cos_sin_cache`: a cos/sin cache builder, posenc rotating with what it returns;
- :func:`frequency_function`: ``(config) -> (inv_freq, attention_factor)``, such as
  transformers' ``ROPE_INIT_FUNCTIONS`` (configs built by :func:`transformers_config`);
- :func:`alibi_tensor`: ``build_alibi_tensor(attention_mask, num_heads, dtype)`` (BLOOM).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from posenc import array_api
from posenc.catalog import specs
from posenc.errors import ParameterError, SpecError, Unsupported

from .adapter_base import (
    ANY,
    Adapter,
    AdapterOutputError,
    Signature,
    as_backend,
    check_array,
    declare,
    declared_inputs_out_of_scope,
    declared_out_of_scope,
    dtype_out_of_scope,
    fixed_values,
    label_of,
    not_taken,
    out_of_scope,
    refused,
    to_numpy,
    unsupported_values,
)
from .offset_convention import offset_function, refuse_array_to_offset
from .pairing import (
    declare_axes,
    declare_pairing,
    own_pairing,
    pairing_layouts,
    pairing_parameter,
)
from .rotary_adapters import apply_rotary, cos_sin_cache, frequency_function, transformers_config

__all__ = ["ANY", "Adapter", "AdapterOutputError", "alibi_tensor", "apply_rotary", "as_backend",
           "bucket_function", "cos_sin_cache", "frequency_function", "function",
           "rope_function", "slopes_function", "transformers_config"]

_PLACEMENT = ("dtype", "device")  # what functions without array inputs take besides parameters


def _spec(encoding: str) -> Any:
    found = specs()
    if encoding not in found:
        raise ParameterError(f"encoding={encoding!r}: no such spec (known: {', '.join(found)})")
    return found[encoding]


def _own_pairing(spec: Any, layout: str | None, declared: dict[str, Any],
                 fixed: dict[str, Any], passed: dict[str, str], defaults: dict[str, Any],
                 label: str) -> tuple[str | None, dict[str, Any]]:
    """``(pairing, declared)``: the pairing ``fn`` is fixed at (None: it takes the pairing
    parameter), with the spec's default moved to it; ``fixed`` and ``defaults`` are updated."""
    key = pairing_parameter(spec.function)[0]  # layout (ggml: mode)
    if layout is None and key not in passed and fixed.get(key) in pairing_layouts(spec.function):
        # the other pairing declared unsupported on a fn without layout: it is fixed at this
        # one, which is a convention to convert, not a scope
        layout = fixed.pop(key)
        declared = {k: v for k, v in declared.items() if k != key}
    pairing = own_pairing(spec.function, layout, declared, key in passed, label)
    if pairing is not None:  # the pairing fn is fixed at: the others are converted to it
        defaults[key] = pairing_parameter(spec.function, pairing)[1]
    return pairing, declared


def _position_convention(fn: Callable[..., Any], spec: Any, names: dict[str, str], label: str,
                         declared: tuple[str | None, Any, bool],
                         layout: str | None) -> tuple[Callable[..., Any], str | None]:
    """``fn`` under its declared position conventions (offset, centre, negative offsets
    legal), and the note naming them."""
    offset, centre, negative = declared
    refuse_array_to_offset(fn, names, label)
    if offset is None:
        if centre is not None:
            raise ParameterError(f"centre={centre!r}: a declared xPos centre needs offset= (the "
                                 "function's own centre follows from its offset and length)")
        return fn, None
    if centre is not None and spec.id != "xpos":
        raise ParameterError(f"centre={centre!r}: only xpos has a centre ({spec.id} given)")
    pairing = layout or spec.defaults().get("layout") or "interleaved"
    wrapped = offset_function(fn, offset, names, spec.defaults(), centre=centre, pairing=pairing,
                              negative=negative, label=label)
    named = centre if isinstance(centre, str) else "declared"
    return wrapped, ", ".join(filter(None, [
        f"positions converted to offset {offset!r}{'' if negative else ' (non-negative)'}"
        " (positions that are no single run: one call per contiguous run)",
        centre is not None and f"xPos centre ({named}) converted to posenc's"]))


def _require_inputs(spec: Any, passed: dict[str, str], label: str) -> None:
    missing = [i.name for i in spec.inputs if not i.optional and i.name not in passed]
    if missing:
        raise ParameterError(f"{label} takes no {missing[0]!r} (the input of {spec.id}); map "
                             f"it: names={{{missing[0]!r}: 'its name in {label}'}}")


def _require_mapped(spec: Any, known: list[str], passed: dict[str, str], signature: Signature,
                    label: str) -> None:
    """A parameter ``fn`` requires that no posenc name reaches: every call would fail, so say
    which posenc name to map to it (the closest one still free)."""
    unmapped = sorted(signature.required - set(passed.values()))
    if not unmapped:
        return
    free = [n for n in known if n not in passed]
    close = difflib.get_close_matches(unmapped[0], free, n=1, cutoff=0.3) or free[:1]
    hint = f"; map it: names={{{close[0]!r}: {unmapped[0]!r}}}" if close else ""
    raise ParameterError(f"{label} requires {unmapped[0]!r}, which is none of {spec.id}'s names "
                         f"({', '.join(known)}){hint}")


def _keyword_arguments(values: dict[str, Any], spec: Any, passed: dict[str, str],
                       signature: Signature, defaults: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``fn`` for a call's ``values`` (in scope), under its names."""
    inputs = [i.name for i in spec.inputs]
    for name in inputs:  # an optional input fn does not take, given: not what it computes
        if name not in passed and getattr(values.get(name), "shape", None) is not None:
            out_of_scope(f"it takes no {name!r} ({name} of shape "
                         f"{[int(n) for n in values[name].shape]} given)")
    kwargs = {}
    for key in spec.parameters:  # a parameter fn requires gets the spec's default
        if key not in values and passed.get(key) in signature.required and key in defaults:
            values = {**values, key: defaults[key]}
    for key, value in values.items():
        if key not in passed:
            continue
        if value is None and key in inputs and passed[key] not in signature.required:
            continue  # an optional input left to fn's own default
        kwargs[passed[key]] = value
    if "positions" in inputs and values.get("positions") is None and \
            passed.get("positions") in signature.required:
        x = values[inputs[0]]
        xp = array_api.namespace(x=x)
        kwargs[passed["positions"]] = array_api.asarray(xp, list(range(x.shape[-2])),
                                                        device=array_api.device_of(x))
    return kwargs


def _probe(spec: Any, fn: Callable[..., Any], arguments: Callable[[dict[str, Any]], Any],
           scope: Callable[[dict[str, Any]], str | None], label: str) -> Any:
    """What ``fn`` itself returns for the first golden case in its scope that runs."""
    for case in spec.cases:
        if not case.inputs and scope(dict(case.params)) is None:
            try:
                return fn(**arguments(dict(case.params)))
            except Exception:
                continue
    raise ParameterError(f"{label}: no golden case of {spec.id} in its scope ran, so its "
                         "framework cannot be told from its result: give framework=")


def function(encoding: str, fn: Callable[..., Any], names: Mapping[str, str] | None = None,
             unsupported: Mapping[str, Any] | None = None, *, framework: str | None = None,
             dtypes: tuple[str, ...] | None = None, label: str | None = None,
             layout: str | None = None, axes: str = "bhsd", offset: str | None = None,
             centre: Any = None, negative_offset: bool = False) -> Adapter:
    """``fn`` as the implementation of spec ``encoding``'s function, called by keyword with the
    inputs and parameters it takes. ``names`` maps posenc's names to ``fn``'s (``{"base":
    "theta", "positions": "position_ids"}``); a name ``fn`` does not take is not passed, and a
    call giving it a value other than the default is out of scope. ``unsupported``: rule ->
    value(s) ``fn`` does not cover (``ANY``: every value but the default); a rule is a posenc
    parameter (``layout``), a dotted path into one (``scaling.rope_type``; ``rope_type``
    alone looks at any depth) or an input's number of axes (``positions.ndim``), decided on
    the effective value (the spec's default where a check leaves a parameter out). Declaring
    the default of a parameter ``fn`` does not take unsupported fixes ``fn`` at the one other
    value the spec allows (``{"layout": "half"}``: an interleaved-only function). A
    ``KeyError`` ``fn`` raises for a value of the call (a rope type it lacks) reports
    unsupported, with the declaration to make. A ``dtype`` for functions without array inputs
    is passed when ``fn`` takes one; otherwise host values it returns (lists, NumPy) are
    converted to it, and arrays are checked in the dtype they come in (see
    :func:`as_backend`). An integer-valued encoding returned as integral floats is judged on
    its values (the conversion is noted in the results). ``layout``: the pairing ``fn`` is fixed at
    (``"interleaved"``, ``"half"``) for an encoding with a pairing ``layout`` parameter; calls
    in the other pairing reach ``fn`` permuted (:mod:`posenc.backends.pairing`); a ``fn`` that
    takes no ``layout`` is fixed at the spec's default, or at the value ``unsupported`` leaves
    it (``{"layout": "half"}``), and converted the same way; for ``sinusoidal`` ``layout`` is
    the table's column layout (``"concat"``: :mod:`posenc.backends.sinusoidal_layouts`).
    ``axes="bshd"``: ``fn`` takes ``x`` as ``[batch, seq, heads, dim]``. ``offset``/``centre``:
    see docs/conventions.md."""
    spec = _spec(encoding)
    label = label or label_of(fn)
    inputs = [i.name for i in spec.inputs]
    known = [*inputs, *spec.parameters, *(_PLACEMENT if spec.dtype_parameter else ())]
    names = dict(names or {})
    fn, converted = _position_convention(fn, spec, names, label, (offset, centre, negative_offset), layout)
    signature = Signature(fn, label)
    signature.check_names(names, known, encoding)
    declared = unsupported_values(unsupported, spec.parameters, encoding, inputs)
    defaults = spec.defaults()
    fixed = fixed_values(spec.parameters, declared, defaults)
    passed = {n: names.get(n, n) for n in known if signature.accepts(names.get(n, n))}
    pairing, declared = _own_pairing(spec, layout, declared, fixed, passed, defaults, label)
    _require_inputs(spec, passed, label)
    _require_mapped(spec, known, passed, signature, label)

    scope = _scope_rule(spec, declared, defaults, fixed, passed)

    def call(*positional: Any, **values: Any) -> Any:
        values = {**dict(zip(inputs, positional, strict=False)), **values}
        kwargs = arguments(values)
        try:
            result = fn(**kwargs)
        except KeyError as exc:
            params = {k: v for k, v in values.items() if k in spec.parameters}
            reason = refused(exc, {**defaults, **params})
            if reason is None:
                raise
            raise Unsupported(reason) from exc
        result, note = _checked(encoding, spec, label, result, values, "dtype" in passed)
        if note != noted[0]:  # a list item, not an attribute: a compiler traces it
            noted[0] = note
        return result

    def arguments(values: dict[str, Any]) -> dict[str, Any]:
        out_of_scope(scope({k: v for k, v in values.items() if k in spec.parameters}))
        out_of_scope(declared_inputs_out_of_scope(values, declared))
        return _keyword_arguments(values, spec, passed, signature, defaults)

    def probe() -> Any:  # what fn itself returns, before any conversion
        return _probe(spec, fn, arguments, scope, label)

    noted: list[str | None] = [None]  # the last call's conversion note, read after it
    declare(call, supplies=lambda: noted[0])
    adapter = Adapter(spec.function, call, label, scope, framework, dtypes,
                      probe=probe if not spec.inputs else None)
    if pairing is not None:
        adapter = declare_pairing(adapter, pairing)
    return _naming_conventions(declare_axes(adapter, axes), converted)


def _scope_rule(spec: Any, declared: Any, defaults: dict[str, Any], fixed: dict[str, Any],
                passed: dict[str, str]) -> Callable[[dict[str, Any]], str | None]:
    """Why a call's parameters are out of ``fn``'s scope (declared, or a value of a parameter
    it does not take), or None."""
    def scope(params: dict[str, Any]) -> str | None:
        reason = declared_out_of_scope(params, declared, defaults)
        if reason:
            return reason
        for key, value in params.items():
            if key in spec.parameters and key not in passed and value != defaults.get(key) \
                    and not (key in fixed and value == fixed[key]):
                return not_taken(key, value)
        return None
    return scope


def _naming_conventions(adapter: Adapter, converted: str | None) -> Adapter:
    """``adapter`` declaring the position conventions it converts (the scope line names them),
    on its own call (a wrapper of the user's function, which is never touched)."""
    if converted:
        declare(adapter.call, conventions=converted)
    return adapter


def _declared_like(spec: Any, key: str) -> str | None:
    """The input whose shape (``key="shape"``) or dtype the spec declares the output's: the
    first input when the output is written with its shape, else the input named after
    'same as' ('same as table', 'the integer dtype of token_types'); None: no input."""
    text = str(spec.data["output"].get(key, ""))
    names = [i.name for i in spec.inputs]
    if key == "shape":
        if text == spec.inputs[0].shape:
            return names[0]
        found = re.fullmatch(r"same as (\w+)", text)
        return found[1] if found and found[1] in names else None
    if "same as the inputs" in text:
        return names[0]
    return next((w for w in re.findall(r"\w+", text) if w in names), None)


def _integral(value: Any) -> bool:
    host = to_numpy(value)
    return bool(np.all(np.isfinite(host)) and np.array_equal(host, np.round(host)))


def _checked(encoding: str, spec: Any, label: str, result: Any, values: dict[str, Any],
             takes_dtype: bool) -> tuple[Any, str | None]:
    """The result, checked (or converted, for host values) against what ``encoding`` returns,
    and a note on any conversion made."""
    given = [values[i.name] for i in spec.inputs if values.get(i.name) is not None]
    first = result[0] if isinstance(result, tuple) and result else result
    rest = result[1:] if isinstance(result, tuple) else ()
    if given:
        shape_of, dtype_of = (values.get(n or "") for n in (_declared_like(spec, "shape"),
                                                             _declared_like(spec, "dtype")))
        like = dtype_of if dtype_of is not None else given[0]
        note = None
        if spec.output_kind == "int" and hasattr(first, "dtype") and \
                array_api.dtype_name(first.dtype).startswith(("float", "bfloat")):
            if not _integral(first):  # left as they are: the harness fails the dtype
                check_array(label, encoding, first, like=like, any_dtype=True, any_shape=True)
                return result, None
            note = (f"its {array_api.dtype_name(first.dtype)} output as "
                    f"{array_api.dtype_name(like.dtype)}: every value integral, judged on "
                    "values (the dtype is a note, not a failure)")
            first = array_api.namespace(x=first).astype(first, like.dtype)
        if dtype_of is None and not takes_dtype:  # the dtype argument, which fn does not take
            dtype_out_of_scope(first, values.get("dtype"))
        check_array(label, encoding, first, like=like,
                    shape=tuple(shape_of.shape) if shape_of is not None else None,
                    any_shape=shape_of is None, any_dtype=dtype_of is None and
                    values.get("dtype") is None, dtype=values.get("dtype")
                    if dtype_of is None else None)
        return ((first, *rest) if isinstance(result, tuple) else first), note
    dtype, device = values.get("dtype"), values.get("device")
    if not (hasattr(first, "shape") and hasattr(first, "dtype")):  # a list, a float: host values
        if not isinstance(first, list | tuple | int | float):
            raise AdapterOutputError(f"{label} ({encoding} adapter) returned "
                                     f"{type(first).__name__}, not an array or a list")
        xp = array_api.namespace_of_dtype(dtype)
        first = array_api.asarray(xp, first, dtype=array_api.output_dtype(xp, dtype), device=device)
    elif array_api.library_of(first) == "numpy" and dtype is not None and not takes_dtype:
        xp = array_api.namespace_of_dtype(dtype)
        first = array_api.asarray(xp, first.tolist(), dtype=dtype, device=device)
    elif not takes_dtype:
        dtype_out_of_scope(first, dtype)
    if "num_heads" in values and encoding == "alibi_slopes":
        check_array(label, encoding, first, shape=(int(values["num_heads"]),), dtype=dtype)
    else:
        check_array(label, encoding, first, dtype=dtype)
    return ((first, *rest) if isinstance(result, tuple) else first), None


def rope_function(fn: Callable[..., Any], names: Mapping[str, str] | None = None,
                  unsupported: Mapping[str, Any] | None = None, **kwargs: Any) -> Adapter:
    """A full rotary function ``fn(x, positions, ...)`` (see :func:`function`)."""
    return function("rope", fn, names, unsupported, **kwargs)


def bucket_function(fn: Callable[..., Any], names: Mapping[str, str] | None = None,
                    unsupported: Mapping[str, Any] | None = None, *,
                    encoding: str = "t5_bucket", **kwargs: Any) -> Adapter:
    """A bucket function such as T5's ``_relative_position_bucket(relative_position,
    bidirectional, num_buckets, max_distance)``; ``encoding="deberta_bucket"`` for DeBERTa's
    ``make_log_bucket_position`` (see :func:`function`)."""
    if encoding not in ("t5_bucket", "deberta_bucket"):
        raise ParameterError(f"encoding={encoding!r}: bucket functions are t5_bucket or "
                             "deberta_bucket")
    names = dict(names or {})
    signature = Signature(fn, label_of(fn))
    if encoding == "deberta_bucket" and "relative_position" not in names and \
            not signature.accepts("relative_position") and signature.accepts("relative_pos"):
        names["relative_position"] = "relative_pos"  # transformers' name
    return function(encoding, fn, names, unsupported, **kwargs)


def slopes_function(fn: Callable[..., Any], names: Mapping[str, str] | None = None,
                    unsupported: Mapping[str, Any] | None = None, **kwargs: Any) -> Adapter:
    """An ALiBi slope function ``fn(num_heads) -> slopes`` (a list or an array; see
    :func:`function`)."""
    return function("alibi_slopes", fn, names, unsupported, **kwargs)


def alibi_tensor(fn: Callable[..., Any], *, framework: str = "torch",
                 dtypes: tuple[str, ...] | None = None, label: str | None = None) -> Adapter:
    """BLOOM-style ``fn(attention_mask, num_heads, dtype) -> [batch * num_heads, 1, k_len]``:
    slope·j, the ``key_only`` form of alibi_bias with the default ``max_bias`` 8 (the other
    forms and biases are out of its scope). posenc passes a mask of ones ``[1, k_len]``."""
    label = label or label_of(fn)
    spec = _spec("alibi_bias")
    Signature(fn, label)  # a function without a signature fails here, not in the harness

    def scope(params: dict[str, Any]) -> str | None:
        if params.get("form", "causal") != "key_only":
            return (f"it builds the key_only form (slope·j, [heads, 1, k_len]), not "
                    f"form={params.get('form', 'causal')!r}")
        if params.get("max_bias", 8.0) != 8.0:
            return not_taken("max_bias", params["max_bias"])
        if params.get("head_dim") is not None:  # Falcon divides by sqrt(d) in its attention
            return not_taken("head_dim", params["head_dim"])
        return None

    def call(num_heads: int, q_len: int, k_len: int, *, form: str = "causal",
             max_bias: float = 8.0, head_dim: int | None = None, dtype: Any = None,
             device: Any = None) -> Any:
        out_of_scope(scope({"form": form, "max_bias": max_bias, "head_dim": head_dim}))
        xp = array_api.namespace_of_dtype(dtype)
        mask = array_api.asarray(xp, [[1] * int(k_len)], dtype=xp.int64, device=device)
        out = fn(mask, int(num_heads), dtype)
        check_array(label, "alibi_bias", out, shape=(int(num_heads), 1, int(k_len)),
                    dtype=dtype, device=device)
        return xp.reshape(out, (int(num_heads), 1, int(k_len)))

    if spec.function != "alibi_bias":
        raise SpecError("alibi_bias spec names another function")
    return Adapter("alibi_bias", call, label, scope, framework, dtypes)
