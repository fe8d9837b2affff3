"""Adapters for the pieces rotary code is split into: ``apply(q, k, cos, sin)``, a cos/sin cache
builder, and a frequency function ``(config) -> (inv_freq, attention_factor)``. Each is
checked against rope's (or rope_frequencies') goldens and properties, posenc supplying or
applying the rest (see :mod:`posenc.backends.adapters`)."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from posenc import array_api, rotary
from posenc.catalog import reference_function, specs
from posenc.encodings.rope import rope_cos_sin
from posenc.encodings.rope_frequencies import schedule, schedule_type
from posenc.errors import ParameterError, Unsupported

from .adapter_base import (
    Adapter,
    AdapterOutputError,
    Signature,
    check_array,
    declare,
    declared_inputs_out_of_scope,
    declared_out_of_scope,
    dtype_out_of_scope,
    label_of,
    not_taken,
    out_of_scope,
    refused,
    to_numpy,
    unsupported_values,
)
from .pairing import declare_pairing, own_pairing

ROPE_PARAMS = ("base", "layout", "rotary_dim", "scaling", "seq_len")
_DEFAULTS = {"base": 10000.0, "layout": "half", "rotary_dim": None, "scaling": None,
             "seq_len": None}


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ParameterError(f"{name}={value!r}: expected one of {', '.join(allowed)}")
    return value


def _partial(params: Mapping[str, Any]) -> bool:
    factor = (params.get("scaling") or {}).get("partial_rotary_factor", 1.0)
    return params.get("rotary_dim") is not None or (factor is not None and factor < 1.0)


# -- cos/sin supplied by posenc ---------------------------------------------------------------
def reference_cos_sin(x: Any, positions: Any, params: Mapping[str, Any]) -> tuple[Any, Any]:
    """Half-width ``(cos, sin)`` ``[batch or 1, seq, rotary_dim/2]`` in float64 NumPy, times the
    attention factor, read off the NumPy reference (a rotation of unit vectors)."""
    seq, dim = int(x.shape[-2]), int(x.shape[-1])
    pos = None if positions is None else to_numpy(positions)
    rd = params.get("rotary_dim") or schedule(dim, base=params.get("base", 10000.0),
                                              scaling=params.get("scaling")).rotary_dim
    batch = pos.shape[0] if pos is not None and pos.ndim == 2 else 1
    probe = np.zeros((batch, seq, dim))
    probe[..., : rd // 2] = 1.0  # pairs (i, i + rd/2) rotate (1, 0) to (cos, sin)
    out = reference_function(specs()["rope"])(
        probe, pos, **{**_DEFAULTS, **dict(params), "layout": "half"})
    return out[..., : rd // 2], out[..., rd // 2: rd]


def _posenc_cos_sin(x: Any, positions: Any, params: Mapping[str, Any]) -> tuple[Any, Any]:
    """The same from posenc's own implementation (exact phases, the compute dtype)."""
    cos, sin, rd = rope_cos_sin(x, positions, **{**dict(params), "layout": "half"})
    xp = array_api.namespace(x=x)
    shape = (-1, int(x.shape[-2]), rd // 2)
    return xp.reshape(cos, shape), xp.reshape(sin, shape)


def _check_apply_options(layout: str, cos_sin: str, x_layout: str, cos_layout: str,
                         source: str, args: tuple[str, ...]) -> None:
    _choice("layout", layout, ("half", "interleaved"))
    _choice("cos_sin", cos_sin, ("full", "half"))
    _choice("x_layout", x_layout, ("bhsd", "bshd"))
    _choice("cos_layout", cos_layout, ("bsw", "sw"))
    _choice("source", source, ("reference", "posenc"))
    for name in args:
        _choice("args item", name, ("q", "k", "x", "cos", "sin"))
    if "cos" not in args or "sin" not in args or not {"q", "x"} & set(args):
        raise ParameterError(f"args={args!r}: name q (or x), cos and sin")


def _apply_once(fn: Callable[..., Any], args: tuple[str, ...], extra: dict[str, Any],
                label: str, xp: Any, x4: Any, cos: Any, sin: Any) -> Any:
    """``fn``'s rotation of ``x4`` (given as q, and as k where it takes k: then k must come
    back equal to q)."""
    given = {"q": x4, "k": x4, "x": x4, "cos": cos, "sin": sin}
    result = fn(*(given[name] for name in args), **extra)
    out = result[0] if isinstance(result, tuple | list) else result
    check_array(label, "rope (apply)", out, like=x4)
    if "k" in args and isinstance(result, tuple | list) and len(result) > 1:
        check_array(label, "rope (apply) k", result[1], like=x4)
        k_out = result[1]
        if not bool(xp.all((out == k_out) | ((out != out) & (k_out != k_out)))):
            diff = xp.max(xp.abs(xp.astype(out, xp.float64) - xp.astype(k_out, xp.float64)))
            raise AdapterOutputError(
                f"{label} rotated k differently from q (the same tensor, the same cos/sin):"
                f" max difference {float(diff):.3e}")
    return out


def _declare_supplies(call: Any, source: str, cos_dtype: str | None) -> None:
    """What posenc computes for an apply function, on its call: the cos/sin it supplies (the
    report's line) and the declared diagnoses that those explain (posenc's, not fn's)."""
    given_in = f"in {cos_dtype}" if cos_dtype is not None else "in q's dtype"
    declare(call, supplies=(f"cos/sin from posenc's {source} "
                            f"({'NumPy float64' if source == 'reference' else 'exact phases'}, "
                            f"rounded once), given {given_in}"),
            explains={
        "positions_in_bfloat16": "posenc turns the positions into cos/sin: fn never sees them",
        "angles_in_bfloat16": f"posenc computes the angles and supplies cos/sin {given_in}: a "
                              "low-precision cos/sin cache here is posenc's input"})


def apply_rotary(fn: Callable[..., Any], *, layout: str = "half", cos_sin: str = "full",
                 args: tuple[str, ...] = ("q", "k", "cos", "sin"), kwargs: Mapping[str, Any]
                 | None = None, x_layout: str = "bhsd", cos_layout: str = "bsw",
                 partial: bool = False, source: str = "reference", cos_dtype: str | None = None,
                 framework: str = "torch", label: str | None = None) -> Adapter:
    """``fn(q, k, cos, sin) -> (q, k)`` (transformers' ``apply_rotary_pos_emb``), checked on
    rope: posenc supplies cos and sin and ``fn`` rotates.

    ``layout``: how ``fn`` pairs features (calls in the other pairing reach it through the
    feature permutation of :mod:`posenc.backends.pairing`). ``cos_sin``:
    ``"full"`` (``[..., rotary_dim]``, duplicated as ``layout`` pairs, as transformers) or
    ``"half"`` (``[..., rotary_dim/2]``). ``args``: what ``fn`` takes, in order (``q``, ``k``,
    ``x`` for one tensor, ``cos``, ``sin``); ``kwargs``: fixed extra arguments. ``x_layout``:
    ``"bhsd"`` ([batch, heads, seq, dim], transformers) or ``"bshd"`` (flash-attn);
    ``cos_layout``: ``"bsw"`` ([batch, seq, width]) or ``"sw"`` ([seq, width]; batched
    positions are then out of scope). ``partial``: ``fn`` rotates the first ``cos`` width of
    the head and passes the rest (else partial rotary is out of scope). ``source``: cos/sin from
    posenc's NumPy ``"reference"`` (float64, rounded once) or its ``"posenc"`` implementation.
    ``cos_dtype``: the dtype cos/sin are given in (default: that of q, as transformers). When
    ``fn`` returns k as well, k (the same input as q) must come back equal to q.
    """
    label = label or label_of(fn)
    _check_apply_options(layout, cos_sin, x_layout, cos_layout, source, args)
    extra = dict(kwargs or {})

    def scope(params: dict[str, Any]) -> str | None:
        if params.get("layout", "half") != layout:
            return f"it pairs features as layout={layout!r}, not {params.get('layout', 'half')!r}"
        if _partial(params) and not partial:
            return ("partial rotary: it is given cos/sin of the full head width (partial=True "
                    "gives it cos/sin of the rotary width)")
        return None

    def call(x: Any, positions: Any = None, **params: Any) -> Any:
        out_of_scope(scope(params))
        xp = array_api.namespace(x=x, positions=positions)
        rope_params = {k: v for k, v in params.items() if k in ROPE_PARAMS and k != "layout"}
        if source == "reference":
            cos, sin = (array_api.asarray(xp, a, dtype=xp.float64 if x.dtype == xp.float64
                                    else xp.float32, device=array_api.device_of(x))
                        for a in reference_cos_sin(x, positions, rope_params))
        else:
            cos, sin = _posenc_cos_sin(x, positions, rope_params)
        if 2 * int(cos.shape[-1]) != int(x.shape[-1]) and not partial:
            # posenc's cos/sin, not fn's output: a width the adapter cannot hand it
            out_of_scope(f"partial rotary: posenc's cos/sin cover {2 * int(cos.shape[-1])} of "
                         f"{x.shape[-1]} features and {label} rotates the whole head "
                         "(partial=True gives it cos/sin of the rotary width)")
        if cos_sin == "full":
            cos, sin = rotary.widen(xp, cos, layout), rotary.widen(xp, sin, layout)
        dtype = x.dtype if cos_dtype is None else getattr(xp, cos_dtype)
        cos, sin = xp.astype(cos, dtype), xp.astype(sin, dtype)
        shape = tuple(int(n) for n in x.shape)
        lead = shape[:-2]
        x4 = xp.reshape(x, (lead[0] if lead else 1, math.prod(lead[1:]), *shape[-2:]))
        if x_layout == "bshd":
            x4 = xp.permute_dims(x4, (0, 2, 1, 3))
        if cos_layout == "bsw":
            out = rotate(xp, x4, cos, sin)
        elif int(cos.shape[0]) == 1:
            out = rotate(xp, x4, cos[0, ...], sin[0, ...])
        elif int(cos.shape[0]) == int(x4.shape[0]):  # [seq, width] tables: a call per batch row
            out = xp.concat([rotate(xp, x4[b:b + 1, ...], cos[b, ...], sin[b, ...])
                             for b in range(int(x4.shape[0]))], axis=0)
        else:
            out_of_scope("batched positions: it takes cos/sin as [seq, width] "
                         "(cos_layout='sw'), without a batch axis")
        if x_layout == "bshd":
            out = xp.permute_dims(out, (0, 2, 1, 3))
        return xp.reshape(out, shape)

    def rotate(xp: Any, x4: Any, cos: Any, sin: Any) -> Any:
        return _apply_once(fn, args, extra, label, xp, x4, cos, sin)

    _declare_supplies(call, source, cos_dtype)
    return declare_pairing(Adapter("rope", call, label, scope, framework,
                                   supplies=call.posenc_supplies), layout)


# -- a cos/sin cache builder ------------------------------------------------------------------
CACHE_NAMES = ("x", "positions", "length", "dim", "base", "scaling", "seq_len", "dtype",
               "device")


def _rotate(xp: Any, x: Any, cos: Any, sin: Any, layout: str) -> Any:
    """x·cos + rotate(x)·sin over the rotated width, cos/sin full width, in their dtype."""
    rd = int(cos.shape[-1])
    head = xp.astype(x[..., :rd], cos.dtype)
    if layout == "half":
        turned = xp.concat([-head[..., rd // 2:], head[..., : rd // 2]], axis=-1)
    else:
        pairs = xp.reshape(head, (*head.shape[:-1], rd // 2, 2))
        turned = xp.reshape(xp.stack([-pairs[..., 1], pairs[..., 0]], axis=-1), head.shape)
    rotated = xp.astype(head * cos + turned * sin, x.dtype)
    if rd == int(x.shape[-1]):
        return rotated
    return xp.concat([rotated, x[..., rd:]], axis=-1)


def _table_length(pos: Any, max_length: int | None) -> int:
    """The length of the table a builder makes for positions ``pos`` (0 .. max)."""
    host = to_numpy(pos)
    if host.size and host.min() < 0:
        out_of_scope("negative positions: it builds a table for positions 0 .. length-1")
    length = int(host.max(initial=-1)) + 1
    if max_length is not None and length > max_length:
        out_of_scope(f"position {length - 1} is beyond its table (max_length={max_length})")
    return length


def _cache_table(label: str, part: Any, x: Any, pos2: Any, *, by_length: bool, width: str,
                 layout: str) -> Any:
    """A returned cos or sin as ``[batch or 1, seq, rotary_dim]`` in float32 (float64 for
    float64 x): checked, read at the positions ``pos2`` ``[batch, seq]`` where the builder
    made a table of a length, and widened from half width."""
    xp = array_api.namespace(x=x)
    seq = int(x.shape[-2])
    check_array(label, "cos/sin cache", part, like=x, dtype=part.dtype
                if hasattr(part, "dtype") else None, any_shape=True)
    table = xp.astype(part, xp.float64 if x.dtype == xp.float64 else xp.float32)
    lead = [int(n) for n in table.shape[:-2]]
    if any(n != 1 for n in lead[:-1]) or (lead and lead[-1] not in (1, pos2.shape[0])):
        raise AdapterOutputError(f"{label} (cos/sin cache adapter) returned shape "
                                 f"{list(part.shape)}: expected [..., seq, width]")
    table = xp.reshape(table, (lead[-1] if lead else 1, *table.shape[-2:]))
    if by_length:  # rows at the positions
        rows = xp.reshape(xp.astype(pos2, xp.int64), (-1,))
        table = xp.take(table[0, ...], rows, axis=0)
        table = xp.reshape(table, (int(pos2.shape[0]), seq, int(table.shape[-1])))
    if width == "half":
        table = rotary.widen(xp, table, layout)
    return table


def _builder_names(fn: Callable[..., Any], names: Mapping[str, str] | None,
                   label: str) -> dict[str, str]:
    """posenc's name -> the builder's, for each of :data:`CACHE_NAMES` it takes."""
    names = dict(names or {})
    # a module (transformers' LlamaRotaryEmbedding) is called through its forward's signature
    signature = Signature(fn if inspect.isroutine(fn) else getattr(fn, "forward", fn), label)
    signature.check_names(names, CACHE_NAMES, "a cos/sin cache builder")
    passed = {n: names.get(n, n) for n in CACHE_NAMES if signature.accepts(names.get(n, n))}
    if "positions" not in passed and "length" not in passed:
        raise ParameterError(f"{label} takes neither positions nor length: map one, e.g. "
                             "names={'length': 'seq_len'}")
    return passed


def _build(fn: Callable[..., Any], kwargs: dict[str, Any], params: dict[str, Any],
           label: str) -> Any:
    """The builder's ``(cos, sin)``; a KeyError for a value of the call is unsupported."""
    try:
        result = fn(**kwargs)
    except KeyError as exc:
        reason = refused(exc, {**_DEFAULTS, **params})
        if reason is None:
            raise
        raise Unsupported(reason) from exc
    if not isinstance(result, tuple | list) or len(result) != 2:
        raise AdapterOutputError(f"{label} (cos/sin cache adapter) returned "
                                 f"{type(result).__name__}, not a pair (cos, sin)")
    return result


def _lined_up(xp: Any, x: Any, positions: Any, cos: Any, sin: Any) -> tuple[Any, Any]:
    """Tables ``[batch or 1, seq, r]`` lined up with ``x`` ``[b, ..., s, d]``."""
    if positions is not None and positions.ndim == 2:
        shape = (int(cos.shape[0]), *([1] * (x.ndim - 3)), int(x.shape[-2]), int(cos.shape[-1]))
        return xp.reshape(cos, shape), xp.reshape(sin, shape)
    return cos[0, ...], sin[0, ...]


def cos_sin_cache(fn: Callable[..., Any], names: Mapping[str, str] | None = None,
                  unsupported: Mapping[str, Any] | None = None, *, layout: str = "half",
                  width: str = "full", batched_positions: bool = False,
                  max_length: int | None = None, framework: str = "torch",
                  label: str | None = None) -> Adapter:
    """A cos/sin cache builder ``fn(...) -> (cos, sin)``, checked on rope: posenc rotates x with
    what it returns (in float32, float64 for float64 x) in ``layout``, the pairing its tables
    are laid out for (calls in the other pairing go through the feature permutation).

    ``fn`` takes, under its own names (``names``), any of: ``positions`` (the positions; with
    ``batched_positions`` always ``[batch, seq]``) or ``length`` (a table for positions
    ``0 .. length-1``, read at the positions; negative positions are then out of scope),
    ``x``, ``dim`` (the head width, or ``rotary_dim`` when a check sets it), ``base``,
    ``scaling``, ``seq_len``, ``dtype`` (of x), ``device``. A rope parameter it does not
    take is out of scope unless it has its default; ``unsupported`` declares values out of
    scope. ``width``: ``"full"`` (``[..., seq,
    rotary_dim]``) or ``"half"`` (``[..., seq, rotary_dim/2]``) tables; leading axes of size
    1 or batch are accepted. ``max_length``: the longest table it builds (a model's
    max_position_embeddings); positions beyond are out of its scope."""
    label = label or label_of(fn)
    _choice("layout", layout, ("half", "interleaved"))
    _choice("width", width, ("full", "half"))
    passed = _builder_names(fn, names, label)
    declared = unsupported_values(unsupported, ROPE_PARAMS, "rope", ("x", "positions"))
    own_pairing("rope", layout, declared, False, label)  # not also scoped out
    taken = {"base", "scaling", "seq_len"} & set(passed)

    def scope(params: dict[str, Any]) -> str | None:
        reason = declared_out_of_scope(params, declared, _DEFAULTS)
        if reason:
            return reason
        if params.get("layout", "half") != layout:
            return (f"its tables pair features as layout={layout!r}, not "
                    f"{params.get('layout', 'half')!r}")
        for key in ("base", "scaling", "seq_len"):
            if key in params and key not in taken and params[key] != _DEFAULTS[key]:
                return not_taken(key, params[key])
        if params.get("rotary_dim") is not None and "dim" not in passed:
            return not_taken("dim", params["rotary_dim"])
        return None

    def call(x: Any, positions: Any = None, **params: Any) -> Any:
        out_of_scope(scope(params))
        xp = array_api.namespace(x=x, positions=positions)
        device = array_api.device_of(x)
        seq, dim = int(x.shape[-2]), int(x.shape[-1])
        pos = positions if positions is not None else array_api.asarray(
            xp, list(range(seq)), dtype=xp.int64, device=device)
        pos2 = pos if pos.ndim == 2 else xp.reshape(pos, (1, seq))
        values: dict[str, Any] = {"x": x, "dtype": x.dtype, "device": device,
                                  **{k: params.get(k, _DEFAULTS[k]) for k in taken}}
        scaling = params.get("scaling")
        # dim: the head width (a scaling dict's partial_rotary_factor is the builder's to apply)
        values["dim"] = params.get("rotary_dim") or dim
        rd = params.get("rotary_dim") or schedule(
            dim, base=params.get("base", 10000.0), scaling=scaling).rotary_dim
        if "positions" in passed:
            values["positions"] = pos2 if batched_positions else pos
        else:
            values["length"] = _table_length(pos, max_length)
        out_of_scope(declared_inputs_out_of_scope({"x": x, "positions": positions}, declared))
        result = _build(fn, {passed[k]: v for k, v in values.items() if k in passed}, params,
                        label)
        cos, sin = (_cache_table(label, part, x, pos2, by_length="length" in values,
                                 width=width, layout=layout) for part in result)
        if int(cos.shape[-1]) != rd and "dim" not in passed:
            out_of_scope(f"its tables are {int(cos.shape[-1])} wide: rotary width {rd} is out "
                         "of its scope")
        if int(cos.shape[-1]) != rd or int(cos.shape[-2]) != seq:
            raise AdapterOutputError(
                f"{label} (cos/sin cache adapter) returned cos of shape {list(result[0].shape)}:"
                f" expected {seq} rows of width {rd // (2 if width == 'half' else 1)}")
        return _rotate(xp, x, *_lined_up(xp, x, positions, cos, sin), layout)

    return declare_pairing(Adapter("rope", call, label, scope, framework), layout)


# -- a frequency function ---------------------------------------------------------------------
def transformers_config(dim: int, base: float, scaling: Mapping[str, Any] | None) -> Any:
    """A transformers ``LlamaConfig`` carrying posenc's rope_frequencies parameters: head_dim
    ``dim``, ``rope_parameters`` the scaling dict (``rope_theta`` from ``base`` unless given;
    ``max_position_embeddings`` from the dict, as a config keeps it beside it)."""
    from transformers import LlamaConfig

    params = dict(scaling or {"rope_type": "default"})
    params.setdefault("rope_theta", float(base))
    if "type" in params:
        params["rope_type"] = params.pop("type")
    params.setdefault("rope_type", "default")
    max_positions = params.pop("max_position_embeddings",
                               4 * params.get("original_max_position_embeddings", 2048))
    return LlamaConfig(hidden_size=dim, num_attention_heads=1, num_key_value_heads=1,
                       head_dim=dim, max_position_embeddings=max_positions,
                       rope_parameters=params)


def frequency_function(fn: Callable[..., Any] | Mapping[str, Callable[..., Any]], *,
                       config: Callable[[int, float, Any], Any] = transformers_config,
                       framework: str | None = None, dtypes: tuple[str, ...] | None = None,
                       label: str | None = None) -> Adapter:
    """A frequency function ``fn(config, device=None, seq_len=None) -> (inv_freq,
    attention_factor)``, or a mapping rope_type -> such functions (transformers'
    ``ROPE_INIT_FUNCTIONS``; a rope_type it lacks is out of scope), checked on
    rope_frequencies. ``config(dim, base, scaling)`` builds what ``fn`` reads (default:
    :func:`transformers_config`). Checked in the dtype ``inv_freq`` comes in unless ``dtypes``
    says otherwise (a function computing in float32 is not held to float64)."""
    table = dict(fn) if isinstance(fn, Mapping) else None
    label = label or ("rope_type mapping" if table is not None else label_of(fn))
    if table is not None and not all(callable(f) for f in table.values()):
        raise ParameterError(f"{label}: every value of the mapping must be a function")

    def pick(scaling: Any) -> Callable[..., Any] | None:
        if table is None:
            return fn  # type: ignore[return-value]
        return table.get(schedule_type(scaling))

    def scope(params: dict[str, Any]) -> str | None:
        if pick(params.get("scaling")) is None:
            kind = schedule_type(params.get("scaling"))
            return f"no function for rope_type {kind!r} (it has: {', '.join(table or {})})"
        return None

    def call(dim: int, *, base: float = 10000.0, scaling: Any = None, seq_len: Any = None,
             dtype: Any = None, device: Any = None) -> Any:
        out_of_scope(scope({"scaling": scaling}))
        chosen = pick(scaling)
        signature = Signature(chosen, label_of(chosen))
        kwargs = {}
        if seq_len is not None and signature.accepts("seq_len"):
            kwargs["seq_len"] = seq_len
        if device is not None and signature.accepts("device"):
            kwargs["device"] = device
        result = chosen(config(int(dim), float(base), scaling), **kwargs)
        if not isinstance(result, tuple | list) or len(result) != 2:
            raise AdapterOutputError(f"{label} (rope_frequencies adapter) returned "
                                     f"{type(result).__name__}, not (inv_freq, attention_factor)")
        inv_freq, factor = result
        expected = len(schedule(int(dim), base=base, scaling=scaling, seq_len=seq_len).inv_freq)
        if not signature.accepts("dtype"):
            dtype_out_of_scope(inv_freq, dtype)
        check_array(label, "rope_frequencies", inv_freq, shape=(expected,), dtype=dtype,
                    device=device)
        try:
            factor = float(factor)
        except (TypeError, ValueError):
            raise AdapterOutputError(f"{label} (rope_frequencies adapter) returned attention "
                                     f"factor {factor!r}, not a number") from None
        return inv_freq, factor

    def probe() -> Any:
        for case in specs()["rope_frequencies"].cases:
            if scope(dict(case.params)) is None:
                return call(**case.params)
        raise ParameterError(f"{label}: no rope_frequencies case is in its scope")

    return Adapter("rope_frequencies", call, label, scope, framework, dtypes, probe=probe)
