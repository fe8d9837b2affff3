"""An absolute table (positions × dimensions) as a heatmap, or one line per dimension."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import SpecError
from ..declaration import PlotDeclaration
from ..figure import Figure, Heatmap, Line, Lines, Panel
from .shared import output, subtitle, title


def figure(decl: PlotDeclaration) -> Figure:
    options = decl.options
    xlabel, ylabel = options.get("xlabel", "dimension"), options.get("ylabel", "position")
    panels: list[Panel] = []
    for series in decl.series:
        for component, values in components(output(decl, series), options.get("components")):
            if values.ndim == 0:
                continue  # a scalar beside the arrays (MLA's softmax scale): nothing to draw
            table = two_dims(values, options.get("index"), decl)
            name = " · ".join(part for part in (series.label, component) if part)
            if options.get("style", "heatmap") == "heatmap":
                panels.append(Heatmap(name, table, xlabel, ylabel))
            else:
                rows = np.arange(table.shape[0])
                lines = tuple(Line(f"dim {j}", rows, table[:, j]) for j in range(table.shape[1]))
                panels.append(Lines(name, lines, ylabel, "value"))
    return Figure(title(decl), subtitle(decl), tuple(panels), columns=min(len(panels), 4))


def components(out: Any, names: list[str] | None = None) -> list[tuple[str, np.ndarray]]:
    """The parts to draw: Re and Im of a complex output, each array of a tuple, or the output."""
    if isinstance(out, tuple):
        names = names or [f"part {i}" for i in range(len(out))]
        return [(names[i] if i < len(names) else f"part {i}", np.asarray(part, float))
                for i, part in enumerate(out)]
    if np.iscomplexobj(out):
        return [("Re", out.real), ("Im", out.imag)]
    return [("", np.asarray(out, float))]


def two_dims(values: np.ndarray, index: list[int | None] | None,
             decl: PlotDeclaration) -> np.ndarray:
    """``values[index]``, then the first entry of each leading axis, as [rows, columns]."""
    if index is not None:
        try:
            values = values[tuple(slice(None) if i is None else i for i in index)]
        except IndexError as exc:
            raise SpecError(f"{decl.spec.path}: plot.options.index {index}: {exc} "
                            f"(output shape {values.shape})") from None
    while values.ndim > 2:
        values = values[0]
    if values.ndim == 0:
        raise SpecError(f"{decl.spec.path}: plot: a scalar output has no table to draw")
    return values.reshape(values.shape[0], -1)
