"""The plot kinds: each turns a plot declaration into a :class:`~posenc.plot.figure.Figure`."""

from __future__ import annotations

from collections.abc import Callable

from ..declaration import PlotDeclaration
from ..figure import Figure
from . import matrices, rotary_logits, spectrum, staircase, table

KINDS: dict[str, Callable[[PlotDeclaration], Figure]] = {
    "table": table.figure,
    "matrices": matrices.figure,
    "staircase": staircase.figure,
    "rotary_logits": rotary_logits.figure,
    "spectrum": spectrum.figure,
}
