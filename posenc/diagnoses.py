"""Known porting bugs a spec declares (``diagnoses:``), evaluated with the NumPy reference.

A diagnosis is what the reference computes with some parameters overridden (``params:``)
and/or through a named transform of this module's registry (``transform:``): inputs shifted
or negated, an output reordered, or a variant of the computation (angles rounded to bfloat16,
a float32 logarithm). The conformance harness compares a failing output with each of them
to name the likely bug; this module only says what each diagnosis evaluates to.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import SpecError

Arrays = dict[str, "np.ndarray | None"]
Reference = Callable[..., Any]


@dataclass(frozen=True)
class Diagnosis:
    name: str
    explanation: str
    title: str
    params: dict[str, Any] = field(default_factory=dict)
    transform: str | None = None

    def describe(self, overrides: Mapping[str, Any]) -> str:
        """What the reference was asked for, e.g. ``layout='interleaved'`` or ``positions + 1``."""
        parts = [f"{k}={v!r}" for k, v in overrides.items()]
        if self.transform is not None:
            parts.append(TRANSFORMS[self.transform].description)
        return ", ".join(parts)


@dataclass(frozen=True)
class Transform:
    """``apply(reference, inputs, params)`` returns the output; ``inputs`` and ``params`` name
    what the spec must declare for the transform to make sense."""

    description: str
    apply: Callable[[Reference, Arrays, dict[str, Any]], Any]
    inputs: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()  # reference modules it is written for (empty: any)


def _call(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    return ref(*inputs.values(), **params)


# -- generic transforms ------------------------------------------------------------------------
def _positions(inputs: Arrays) -> np.ndarray:
    """The positions input; omitted, the rotary default arange(seq) over x's second-last axis."""
    if inputs.get("positions") is not None:
        return np.asarray(inputs["positions"])
    return np.arange(np.asarray(inputs["x"]).shape[-2])


def _shift_positions(by: int) -> Callable[[Reference, Arrays, dict[str, Any]], Any]:
    def apply(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
        return _call(ref, {**inputs, "positions": _positions(inputs) + by}, params)
    return apply


def _round_significand(values: np.ndarray, bits: int) -> np.ndarray:
    """Round to ``bits`` significant bits, to nearest even (bfloat16: 8, float16: 11)."""
    mantissa, exponent = np.frexp(np.asarray(values, dtype=np.float64))
    return np.ldexp(np.round(np.ldexp(mantissa, bits)), exponent - bits)


def _positions_bfloat16(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    rounded = _round_significand(_positions(inputs), 8).astype(np.int64)
    return _call(ref, {**inputs, "positions": rounded}, params)


def _negate(name: str) -> Callable[[Reference, Arrays, dict[str, Any]], Any]:
    def apply(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
        return _call(ref, {**inputs, name: -np.asarray(inputs[name])}, params)
    return apply


def _negated_output(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    return -np.asarray(_call(ref, inputs, params))


def _doubled_output(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    return 2 * np.asarray(_call(ref, inputs, params))


def _heads_reversed(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    return np.asarray(_call(ref, inputs, params))[::-1]


def _num_buckets_halved(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    return _call(ref, inputs, {**params, "num_buckets": params["num_buckets"] // 2})


# -- rotary ------------------------------------------------------------------------------------
def _rotary_width(inputs: Arrays, params: dict[str, Any]) -> int:
    from .reference._rope_schedules import rotary_width

    dim = np.asarray(inputs["x"]).shape[-1]
    return params["rotary_dim"] or rotary_width(dim, params["scaling"])


def _rotary_on_last_dims(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    x = np.asarray(inputs["x"])
    rd, dim = _rotary_width(inputs, params), x.shape[-1]
    moved = np.concatenate([x[..., dim - rd:], x[..., :dim - rd]], axis=-1)
    out = np.asarray(_call(ref, {**inputs, "x": moved}, {**params, "rotary_dim": rd}))
    return np.concatenate([out[..., rd:], out[..., :rd]], axis=-1)


def _full_width(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    return _call(ref, inputs, {**params, "rotary_dim": np.asarray(inputs["x"]).shape[-1]})


def _no_attention_factor(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    scaling = params["scaling"]
    if scaling:
        scaling = {**scaling, "attention_factor": 1.0}
    return _call(ref, inputs, {**params, "scaling": scaling})


def _angles_bfloat16(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    """The reference's rotation with every angle m·θ_i rounded to bfloat16 before cos/sin."""
    from .reference._rope_schedules import frequencies, kind

    x = np.asarray(inputs["x"], dtype=np.float64)
    positions = _positions(inputs)
    rd = _rotary_width(inputs, params)
    seq_len = params["seq_len"]
    if seq_len is None and kind(params["scaling"]) in ("dynamic", "longrope"):
        seq_len = x.shape[-2] if inputs.get("positions") is None else int(positions.max()) + 1
    thetas, attention = frequencies(rd, params["base"], params["scaling"], seq_len)
    half = rd // 2
    if params["layout"] == "half":
        a, b = np.arange(half), np.arange(half) + half
    else:
        a, b = np.arange(half) * 2, np.arange(half) * 2 + 1
    angles = _round_significand(positions[..., None].astype(np.float64) * np.asarray(thetas), 8)
    if angles.ndim == 3:  # [batch, seq, half] against x [batch, ..., seq, dim]
        angles = angles.reshape(angles.shape[0], *([1] * (x.ndim - 3)), *angles.shape[1:])
    cos, sin = np.cos(angles) * attention, np.sin(angles) * attention
    out = x.copy()
    out[..., a] = x[..., a] * cos - x[..., b] * sin
    out[..., b] = x[..., b] * cos + x[..., a] * sin
    return out


# -- T5 ----------------------------------------------------------------------------------------
def _log_float32(values: np.ndarray) -> np.ndarray:
    return np.log(values.astype(np.float64)).astype(np.float32)


def _t5_float32_bucket(rel: np.ndarray, bidirectional: bool, num_buckets: int,
                       max_distance: int) -> np.ndarray:
    """transformers' _relative_position_bucket, its logarithm evaluated in float32."""
    rel = np.asarray(rel, dtype=np.int64)
    out = np.zeros(rel.shape, dtype=np.int64)
    if bidirectional:
        num_buckets //= 2
        out += (rel > 0) * num_buckets
        n = np.abs(rel)
    else:
        n = np.maximum(-rel, 0)
    max_exact = num_buckets // 2
    with np.errstate(divide="ignore"):  # a correctly rounded float32 log (libm's float32
        # logs differ by an ulp between libraries: rounding the float64 log is the portable rule)
        ratio = _log_float32(n.astype(np.float32) / np.float32(max_exact))
    ratio = ratio / np.float32(math.log(max_distance / max_exact))
    with np.errstate(invalid="ignore"):  # log(0) = -inf, in the branch np.where drops
        large = max_exact + (ratio * np.float32(num_buckets - max_exact)).astype(np.int64)
    large = np.minimum(large, num_buckets - 1)
    return out + np.where(n < max_exact, n, large)


def _t5_float32_log(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    return _t5_float32_bucket(inputs["relative_position"], params["bidirectional"],
                              params["num_buckets"], params["max_distance"])


def _t5_bias_query_minus_key(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    from .reference.t5 import t5_bucket

    table = np.asarray(inputs["table"], dtype=np.float64)
    queries = params["query_offset"] + np.arange(params["q_len"])
    rel = queries[:, None] - np.arange(params["k_len"])[None, :]  # query − key
    buckets = t5_bucket(rel, bidirectional=params["bidirectional"],
                        num_buckets=params["num_buckets"], max_distance=params["max_distance"])
    return np.moveaxis(table[buckets], -1, 0)


# -- ALiBi -------------------------------------------------------------------------------------
def _rescale_slopes(variant: Callable[[int, float], np.ndarray]) -> Callable[..., Any]:
    """ALiBi outputs are linear in each head's slope: the reference's output, head by head,
    times variant slope / reference slope."""
    def apply(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
        from .reference.alibi import alibi_slopes

        heads, max_bias = params["num_heads"], params["max_bias"]
        ratio = variant(heads, max_bias) / alibi_slopes(num_heads=heads, max_bias=max_bias)
        out = np.asarray(_call(ref, inputs, params))
        return out * ratio.reshape(-1, *([1] * (out.ndim - 1)))
    return apply


def _geometric(heads: int, max_bias: float) -> np.ndarray:
    return 2.0 ** (-max_bias * np.arange(1, heads + 1) / heads)


def _extra_slopes_even(heads: int, max_bias: float) -> np.ndarray:
    closest = 1 << (heads.bit_length() - 1)  # the largest power of two <= heads
    extra = _geometric(2 * closest, max_bias)[1::2][: heads - closest]
    return np.concatenate([_geometric(closest, max_bias), extra])


def _alibi_queries_from_zero(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    """Queries at positions 0..q_len−1, not the last q_len: the first rows of the square bias.
    The reference (loops, for clarity) gives the bias of a query row at distance d from a key
    as a function of d alone, so the rows come from its one-query bias over the keys, each
    row read at its own distances: no k_len × k_len square (4096 keys decode in a case)."""
    if params["form"] == "key_only":
        return np.asarray(_call(ref, inputs, params))
    q_len, k_len = params["q_len"], params["k_len"]
    # one query at position k_len − 1: column j holds the bias at distance d = k_len − 1 − j
    last = np.asarray(_call(ref, inputs, {**params, "q_len": 1}))[:, 0, :]  # [heads, k_len]
    by_distance = last[:, ::-1]  # [heads, d] for d = 0 .. k_len − 1
    rows = np.arange(q_len)[:, None]
    keys = np.arange(k_len)[None, :]
    distance = rows - keys  # query r at position r, key j
    if params["form"] == "symmetric":
        return by_distance[:, np.abs(distance)]
    # causal, −slope·d: keys after the query (d < 0, masked in use) continue the line, whose
    # step −slope is the bias at distance 1 (the same product the reference rounds)
    inside = by_distance[:, distance.clip(min=0)]
    if k_len < 2:
        return inside
    step = by_distance[:, 1][:, None, None]
    return np.where(distance[None] >= 0, inside, step * distance[None])


# -- DeBERTa -----------------------------------------------------------------------------------
def _deberta_log_bucket(rounding: Callable[[Any], Any], dtype: type) -> Callable[..., Any]:
    """transformers' make_log_bucket_position with another rounding or another float dtype."""
    log = _log_float32 if dtype is np.float32 else np.log

    def apply(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
        rel = np.asarray(inputs["relative_position"], dtype=np.int64)
        mid, max_position = params["bucket_size"] // 2, params["max_position"]
        if params["clamp"] == "original":
            rel = np.clip(rel, -(max_position - 1), max_position - 1)
        magnitude = np.abs(rel).astype(dtype)
        with np.errstate(divide="ignore", invalid="ignore"):
            x = (log(magnitude / dtype(mid)) / log(np.asarray([(max_position - 1) / mid], dtype))
                 * dtype(mid - 1))
            bucket = (rounding(x).astype(np.int64) + mid) * np.sign(rel)
        return np.where(np.abs(rel) <= mid, rel, bucket)
    return apply


TRANSFORMS: dict[str, Transform] = {
    "positions_plus_one": Transform("positions + 1", _shift_positions(1), inputs=("positions",)),
    "positions_minus_one": Transform("positions − 1", _shift_positions(-1), inputs=("positions",)),
    "positions_in_bfloat16": Transform("positions rounded to bfloat16", _positions_bfloat16,
                                       inputs=("positions",)),
    "relative_position_negated": Transform("−relative_position", _negate("relative_position"),
                                           inputs=("relative_position",)),
    "output_negated": Transform("the output negated", _negated_output),
    "output_doubled": Transform("the output doubled", _doubled_output),
    "heads_reversed": Transform("heads in reverse order", _heads_reversed, params=("num_heads",)),
    "num_buckets_halved": Transform("num_buckets // 2", _num_buckets_halved,
                                    params=("num_buckets",)),
    "rotary_on_last_dims": Transform("the last rotary_dim features rotated", _rotary_on_last_dims,
                                     inputs=("x",), params=("rotary_dim",), modules=("rope",)),
    "partial_rotary_on_full_width": Transform("rotary_dim = the full width", _full_width,
                                              inputs=("x",), params=("rotary_dim",)),
    "attention_factor_missing": Transform("scaling attention_factor = 1", _no_attention_factor,
                                          params=("scaling",), modules=("rope",)),
    "angles_in_bfloat16": Transform("angles m·θ rounded to bfloat16", _angles_bfloat16,
                                    inputs=("x", "positions"), modules=("rope",)),
    "t5_float32_log": Transform("the bucket's logarithm in float32", _t5_float32_log,
                                inputs=("relative_position",), modules=("t5",)),
    "t5_bias_query_minus_key": Transform("buckets of query − key", _t5_bias_query_minus_key,
                                         inputs=("table",), modules=("t5",)),
    "alibi_geometric_slopes": Transform("slopes 2^(−max_bias·h/n) for every n",
                                        _rescale_slopes(_geometric), modules=("alibi",)),
    "alibi_extra_slopes_even": Transform("extra slopes from the even powers",
                                         _rescale_slopes(_extra_slopes_even), modules=("alibi",)),
    "alibi_queries_from_zero": Transform("queries at 0..q_len−1", _alibi_queries_from_zero,
                                         params=("q_len", "k_len", "form"), modules=("alibi",)),
    "deberta_floor": Transform("floor of the log term", _deberta_log_bucket(np.floor, np.float64),
                               inputs=("relative_position",), modules=("deberta",)),
    "deberta_float32_log": Transform("the log term in float32",
                                     _deberta_log_bucket(np.ceil, np.float32),
                                     inputs=("relative_position",), modules=("deberta",)),
}


def parse(raw: list[dict[str, Any]], path: Path, *, module: str, reference: Reference,
          parameters: Mapping[str, Any], inputs: tuple[str, ...],
          check_value: Callable[[str, str, Any], None]) -> tuple[Diagnosis, ...]:
    """Validated diagnoses of one spec (``raw`` already matches the schema): every one must be
    something the reference can evaluate, else a :class:`SpecError` naming it and the problem."""
    accepted = set(inspect.signature(reference).parameters)
    out: list[Diagnosis] = []
    for idx, entry in enumerate(raw):
        name = entry["name"]
        where = f"{path}: diagnoses[{idx}] ({name})"
        if name in {d.name for d in out}:
            raise SpecError(f"{where}: duplicate diagnosis name {name!r}")
        for pname, value in entry.get("params", {}).items():
            if pname not in parameters or pname not in accepted:
                raise SpecError(f"{where}: params.{pname}: the reference function has no "
                                f"parameter {pname!r} (known: {', '.join(sorted(parameters))})")
            check_value(f"diagnoses[{idx}].params", pname, value)
        transform = entry.get("transform")
        if transform is not None:
            if transform not in TRANSFORMS:
                raise SpecError(f"{where}: transform: unknown transform {transform!r} "
                                f"(known: {', '.join(sorted(TRANSFORMS))})")
            spec_t = TRANSFORMS[transform]
            if spec_t.modules and module not in spec_t.modules:
                raise SpecError(f"{where}: transform {transform!r} is written for the "
                                f"{', '.join(spec_t.modules)} reference, not {module!r}")
            missing = [i for i in spec_t.inputs if i not in inputs]
            missing += [p for p in spec_t.params if p not in parameters]
            if missing:
                raise SpecError(f"{where}: transform {transform!r} needs "
                                f"{', '.join(map(repr, missing))}, which the spec does not declare")
        out.append(Diagnosis(name=name, explanation=entry["explanation"],
                             title=entry.get("title", name.replace("_", " ")),
                             params=dict(entry.get("params", {})), transform=transform))
    return tuple(out)


def evaluate(diagnosis: Diagnosis, reference: Reference, inputs: Arrays,
             params: Mapping[str, Any]) -> Any:
    """The reference's output under ``diagnosis``; ``params`` are the case's resolved
    parameters (defaults included), ``inputs`` its arrays in declared order."""
    merged = {**params, **diagnosis.params}
    if diagnosis.transform is None:
        return _call(reference, inputs, merged)
    return TRANSFORMS[diagnosis.transform].apply(reference, dict(inputs), merged)


from ._zoo_diagnoses import TRANSFORMS as _ZOO_TRANSFORMS  # noqa: E402  (needs Transform above)

TRANSFORMS.update(_ZOO_TRANSFORMS)

from ._cope_diagnoses import TRANSFORMS as _COPE_TRANSFORMS  # noqa: E402

TRANSFORMS.update(_COPE_TRANSFORMS)

from ._mrope_diagnoses import TRANSFORMS as _MROPE_TRANSFORMS  # noqa: E402

TRANSFORMS.update(_MROPE_TRANSFORMS)

from ._schedule_diagnoses import TRANSFORMS as _SCHEDULE_TRANSFORMS  # noqa: E402

TRANSFORMS.update(_SCHEDULE_TRANSFORMS)
