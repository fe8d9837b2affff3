"""What every diagnosis module shares: the :class:`Diagnosis` and :class:`Transform` types, the
transform registry and its discovery, the helpers transforms are written with (:func:`call`,
:func:`positions`, :func:`round_significand`, :func:`log_float32`), and the reading
(:func:`parse`) and evaluation (:func:`evaluate`) of a spec's ``diagnoses:``.

A transform module registers its transforms with :func:`register` when it is imported;
:func:`transforms` imports every module of this package once (like
``posenc.conformance.properties``), so a new module needs no edit here.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import SpecError
from ..rotary.schedules import frequencies, kind, rotary_width

Arrays = dict[str, "np.ndarray | None"]
Reference = Callable[..., Any]

# modules of this package that hold no transforms
NOT_TRANSFORMS = frozenset({"base"})


@dataclass(frozen=True)
class Diagnosis:
    name: str
    explanation: str
    title: str
    params: dict[str, Any] = field(default_factory=dict)
    transform: str | None = None

    def describe(self, overrides: Mapping[str, Any], fitted: Mapping[str, Any] | None = None
                 ) -> str:
        """What the reference was asked for, e.g. ``layout='interleaved'`` or ``positions + 1``
        (a fitted transform's description filled with what was fitted, e.g. its cache rows)."""
        parts = [f"{k}={v!r}" for k, v in overrides.items()]
        if self.transform is not None:
            parts.append(transforms()[self.transform].description.format_map(dict(fitted or {})))
        return ", ".join(parts)

    def explained(self, fitted: Mapping[str, Any] | None = None) -> str:
        """The explanation, with a fitted transform's values filled in (``{rows}``...)."""
        return self.explanation.format_map(dict(fitted or {})) if fitted else self.explanation


@dataclass(frozen=True)
class Transform:
    """``apply(reference, inputs, params)`` returns the output; ``inputs`` and ``params`` name
    what the spec must declare for the transform to make sense."""

    description: str
    apply: Callable[[Reference, Arrays, dict[str, Any]], Any]
    inputs: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()  # reference modules it is written for (empty: any)
    # ``fit(inputs, params, actual)``: what the transform needs to know from the output under
    # test (e.g. the row a cache freezes at), given to ``apply`` in params; None: no fit there;
    # ``actual`` None: the value to plant it with on these inputs
    fit: Callable[[Arrays, dict[str, Any], np.ndarray | None], dict[str, Any] | None] | None = None


_REGISTRY: dict[str, Transform] = {}


def register(**named: Transform) -> None:
    """Add transforms to the registry under their keyword names (a name taken twice raises)."""
    for name, transform in named.items():
        if name in _REGISTRY:
            raise RuntimeError(f"diagnosis transform {name!r} registered twice")
        _REGISTRY[name] = transform


@cache
def transforms() -> dict[str, Transform]:
    """Every registered transform, by name, after importing each module of this package."""
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if info.name not in NOT_TRANSFORMS and not info.name.startswith("_"):
            importlib.import_module(f"{__package__}.{info.name}")
    return dict(_REGISTRY)


# -- helpers for transforms -----------------------------------------------------------------------
def call(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    """The reference on ``inputs`` (in declared order, positionally) with ``params``."""
    return ref(*inputs.values(), **params)


def positions(inputs: Arrays) -> np.ndarray:
    """The positions input; omitted, the rotary default arange(seq) over x's second-last axis."""
    if inputs.get("positions") is not None:
        return np.asarray(inputs["positions"])
    return np.arange(np.asarray(inputs["x"]).shape[-2])


def rotary_call(inputs: Arrays, params: dict[str, Any]
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, np.ndarray, np.ndarray]:
    """A rope call as its reference evaluates it: x (float64), the positions, the rotary
    frequencies, the attention factor and the two features of each pair."""
    x = np.asarray(inputs["x"], dtype=np.float64)
    pos = positions(inputs)
    rd = params["rotary_dim"] or rotary_width(x.shape[-1], params["scaling"])
    seq_len = params["seq_len"]
    if seq_len is None and kind(params["scaling"]) in ("dynamic", "longrope"):
        seq_len = x.shape[-2] if inputs.get("positions") is None else int(pos.max()) + 1
    thetas, attention = frequencies(rd, params["base"], params["scaling"], seq_len)
    half = rd // 2
    if params["layout"] == "half":
        a, b = np.arange(half), np.arange(half) + half
    else:
        a, b = np.arange(half) * 2, np.arange(half) * 2 + 1
    return x, pos, np.asarray(thetas, np.float64), attention, a, b


def rows_of(x: np.ndarray, values: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Per-position ``values`` ([seq, ...], or [batch, seq, ...] for positions ``pos`` of shape
    [batch, seq]) shaped to broadcast against x's rows ([..., seq, ...])."""
    values = np.asarray(values)
    if np.ndim(pos) == 2:
        return values.reshape(values.shape[0], *([1] * (x.ndim - 3)), *values.shape[1:])
    return values


def round_significand(values: np.ndarray, bits: int) -> np.ndarray:
    """Round to ``bits`` significant bits, to nearest even (bfloat16: 8, float16: 11)."""
    mantissa, exponent = np.frexp(np.asarray(values, dtype=np.float64))
    return np.ldexp(np.round(np.ldexp(mantissa, bits)), exponent - bits)


def log_float32(values: np.ndarray) -> np.ndarray:
    """A correctly rounded float32 logarithm (libm's float32 logs differ by an ulp between
    libraries: rounding the float64 log is the portable rule)."""
    return np.log(values.astype(np.float64)).astype(np.float32)


# -- a spec's diagnoses ---------------------------------------------------------------------------
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
            _check_transform(where, transform, module, parameters, inputs)
        out.append(Diagnosis(name=name, explanation=entry["explanation"],
                             title=entry.get("title", name.replace("_", " ")),
                             params=dict(entry.get("params", {})), transform=transform))
    return tuple(out)


def _check_transform(where: str, name: str, module: str, parameters: Mapping[str, Any],
                     inputs: tuple[str, ...]) -> None:
    known = transforms()
    if name not in known:
        raise SpecError(f"{where}: transform: unknown transform {name!r} "
                        f"(known: {', '.join(sorted(known))})")
    spec_t = known[name]
    if spec_t.modules and module not in spec_t.modules:
        raise SpecError(f"{where}: transform {name!r} is written for the "
                        f"{', '.join(spec_t.modules)} reference, not {module!r}")
    missing = [i for i in spec_t.inputs if i not in inputs]
    missing += [p for p in spec_t.params if p not in parameters]
    if missing:
        raise SpecError(f"{where}: transform {name!r} needs "
                        f"{', '.join(map(repr, missing))}, which the spec does not declare")


def fitted(diagnosis: Diagnosis, inputs: Arrays, params: Mapping[str, Any],
           actual: Any) -> dict[str, Any] | None:
    """What a fitted transform reads from the output under test (``{}`` for any other
    diagnosis; None where the output shows nothing the transform can fit). With no output
    (``actual`` None), the transform's own choice for planting it on these inputs."""
    transform = transforms().get(diagnosis.transform) if diagnosis.transform else None
    if transform is None or transform.fit is None:
        return {}
    return transform.fit(dict(inputs), {**params, **diagnosis.params},
                         None if actual is None else np.asarray(actual))


def evaluate(diagnosis: Diagnosis, reference: Reference, inputs: Arrays,
             params: Mapping[str, Any], fit: Mapping[str, Any] | None = None) -> Any:
    """The reference's output under ``diagnosis``; ``params`` are the case's resolved
    parameters (defaults included), ``inputs`` its arrays in declared order, ``fit`` what
    :func:`fitted` read for a fitted transform."""
    merged = {**params, **diagnosis.params}
    if diagnosis.transform is None:
        return call(reference, inputs, merged)
    if fit is None:  # a fitted transform, planted at its own choice for these inputs
        fit = fitted(diagnosis, inputs, params, None)
        if fit is None:
            raise ValueError(f"{diagnosis.name}: nothing to plant on these inputs")
    return transforms()[diagnosis.transform].apply(reference, dict(inputs), {**merged, **fit})
