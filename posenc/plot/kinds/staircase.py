"""Bucket index against relative position (T5, DeBERTa): a staircase, one line per series."""

from __future__ import annotations

import numpy as np

from ...errors import SpecError
from ..declaration import PlotDeclaration
from ..figure import Figure, Line, Lines
from ..implementation import call
from ..inputs import materialise
from .shared import subtitle, title


def figure(decl: PlotDeclaration) -> Figure:
    name = decl.options.get("input") or _first_int_input(decl)
    lines = []
    for series in decl.series:
        arrays = materialise(decl.spec, decl.series_inputs(series))
        if name not in arrays:
            raise SpecError(f"{decl.spec.path}: plot.inputs: the staircase needs input {name!r}")
        buckets = call(decl.spec, arrays, decl.series_params(series))
        lines.append(Line(series.label, np.ravel(arrays[name]), np.ravel(buckets)))
    panel = Lines("", tuple(lines), decl.options.get("xlabel", name),
                  decl.options.get("ylabel", "bucket"), steps=True)
    return Figure(title(decl), subtitle(decl), (panel,), columns=1)


def _first_int_input(decl: PlotDeclaration) -> str:
    for item in decl.spec.inputs:
        if item.kind == "int":
            return item.name
    raise SpecError(f"{decl.spec.path}: plot: kind 'staircase' needs an integer input")
