"""Query × key matrices (attention biases, scores, weights), one panel per head and series."""

from __future__ import annotations

import numpy as np

from ...errors import SpecError
from ..declaration import PlotDeclaration
from ..figure import Figure, Heatmap
from .shared import output, subtitle, title


def figure(decl: PlotDeclaration) -> Figure:
    options = decl.options
    xlabel, ylabel = options.get("xlabel", "key j"), options.get("ylabel", "query i")
    panels = []
    columns = 1
    for series in decl.series:
        out = output(decl, series)
        if isinstance(out, tuple) or out.ndim < 2:
            raise SpecError(f"{decl.spec.path}: plot: kind 'matrices' needs an output "
                            f"[..., q_len, k_len], got {_describe(out)}")
        stack = np.asarray(out, float).reshape(-1, *out.shape[-2:])
        heads = options.get("heads") or spread(len(stack), options.get("max_heads", 4))
        if max(heads) >= len(stack):
            raise SpecError(f"{decl.spec.path}: plot.options.heads {heads}: the output has "
                            f"{len(stack)} matrices")
        for h in heads:
            head = f"head {h}" if len(stack) > 1 else ""
            name = " · ".join(part for part in (series.label, head) if part)
            panels.append(Heatmap(name, stack[h], xlabel, ylabel))
        columns = max(columns, len(heads))
    if columns == 1:  # one matrix per series: the series side by side
        columns = min(len(panels), 4)
    return Figure(title(decl), subtitle(decl), tuple(panels), columns=columns)


def spread(n: int, most: int) -> list[int]:
    """At most ``most`` indices of ``range(n)``, evenly spread and including both ends."""
    if n <= most:
        return list(range(n))
    return sorted({round(float(i)) for i in np.linspace(0, n - 1, most)})


def _describe(out: object) -> str:
    if isinstance(out, tuple):
        return f"a tuple of {len(out)}"
    return f"shape {getattr(out, 'shape', '?')}"
