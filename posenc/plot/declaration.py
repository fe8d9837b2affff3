"""A spec's ``plot:`` section (or its family's default), resolved and validated.

``plot:`` names a kind (table, matrices, staircase, rotary_logits, spectrum), the encoding's
parameters and inputs to draw it with (optionally starting from a golden case), and
``series``: several curves or panels, each overlaying its own parameters and inputs. Specs
without one get a default by family: the first golden case's output as a table (absolute,
other, operator) or per-head matrices (relative), RoPE's relative logit (rotary).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import jsonschema

from ..errors import ParameterError, SpecError
from ..specs import Spec

DEFAULT_KIND = {"absolute": "table", "other": "table", "operator": "table",
                "relative": "matrices", "rotary": "rotary_logits"}


@dataclass(frozen=True)
class Series:
    label: str  # empty for a plot of one series
    params: dict[str, Any]
    inputs: dict[str, Any]  # input name -> plot input (a generator mapping)


@dataclass(frozen=True)
class PlotDeclaration:
    spec: Spec
    kind: str
    params: dict[str, Any]  # common to every series
    inputs: dict[str, Any]
    series: tuple[Series, ...]
    options: dict[str, Any]
    caption: str
    declared: bool  # False: the family's default

    def series_params(self, series: Series) -> dict[str, Any]:
        return {**self.params, **series.params}

    def series_inputs(self, series: Series) -> dict[str, Any]:
        return {**self.inputs, **series.inputs}


def declaration(spec: Spec) -> PlotDeclaration:
    """The plot of ``spec``: its ``plot:`` section, or the default of its family."""
    raw = spec.data.get("plot")
    declared = raw is not None
    if raw is None:
        raw = {"kind": DEFAULT_KIND[spec.family]}
        if raw["kind"] != "rotary_logits":
            raw["case"] = spec.cases[0].name
    params: dict[str, Any] = {}
    inputs: dict[str, Any] = {}
    if "case" in raw:
        case = spec.case(raw["case"])
        params, inputs = dict(case.params), dict(case.inputs)
    params.update(raw.get("params", {}))
    inputs.update(raw.get("inputs", {}))
    where = f"{spec.path}: plot"
    check_params(spec, params, where=f"{where}.params")
    _check_input_names(spec, inputs, f"{where}.inputs")
    series = []
    for i, item in enumerate(raw.get("series", [{"label": ""}])):
        check_params(spec, item.get("params", {}), where=f"{where}.series[{i}].params")
        _check_input_names(spec, item.get("inputs", {}), f"{where}.series[{i}].inputs")
        series.append(Series(item["label"], dict(item.get("params", {})),
                             dict(item.get("inputs", {}))))
    options = dict(raw.get("options", {}))
    for key in ("query_params", "key_params"):
        check_params(spec, options.get(key, {}), where=f"{where}.options.{key}")
    caption = raw.get("caption") or _default_caption(spec, raw)
    return PlotDeclaration(spec, raw["kind"], params, inputs, tuple(series), options, caption,
                           declared)


def with_params(decl: PlotDeclaration, overrides: Mapping[str, Any]) -> PlotDeclaration:
    """``decl`` with the user's parameters: they win over the declaration's, and series that
    vary one of them collapse into a single plot (they would all look the same)."""
    if not overrides:
        return decl
    check_params(decl.spec, overrides)
    series = decl.series
    if any(key in s.params for s in series for key in overrides):
        series = (Series("", {}, {}),)
    return replace(decl, params={**decl.params, **overrides}, series=series)


def check_params(spec: Spec, params: Mapping[str, Any], *, where: str | None = None) -> None:
    """Every key a parameter of ``spec`` and every value valid for its declaration.

    ``where`` (a spec location) makes problems :class:`SpecError`; without it they are the
    user's and raise :class:`ParameterError`.
    """
    error = ParameterError if where is None else SpecError
    prefix = f"{spec.id}: " if where is None else f"{where}: "
    for name, value in params.items():
        decl = spec.parameters.get(name)
        if decl is None:
            known = ", ".join(spec.parameters) or "none"
            raise error(f"{prefix}unknown parameter {name!r} (known: {known})")
        schema = {k: v for k, v in decl.items() if k not in ("doc", "default", "required")}
        try:
            jsonschema.validate(value, schema)
        except jsonschema.ValidationError as exc:
            raise error(f"{prefix}parameter {name}={value!r}: {exc.message}") from None


def _check_input_names(spec: Spec, inputs: Mapping[str, Any], where: str) -> None:
    declared = [i.name for i in spec.inputs]
    for name in inputs:
        if name not in declared:
            raise SpecError(f"{spec.path}: {where}.{name}: {spec.id} has no input {name!r} "
                            f"(declared: {', '.join(declared) or 'none'})")


def _default_caption(spec: Spec, raw: Mapping[str, Any]) -> str:
    if "case" in raw:
        return f"The output of the golden case `{raw['case']}`."
    return f"The {raw['kind'].replace('_', ' ')} of `{spec.function}` with its default parameters."
