"""What a plot shows, as plain NumPy data: panels of heatmaps or lines, no matplotlib.

The plot kinds compute a :class:`Figure` from posenc's implementations; :mod:`.render` draws
any figure. Keeping the two apart lets tests compare a figure's numbers with the encoding's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Heatmap:
    """A 2-D array drawn row by row from the top; ``x``/``y`` give the coordinates of the
    columns/rows when they are not 0, 1, 2, … (e.g. offsets from a centre)."""

    title: str
    values: np.ndarray
    xlabel: str
    ylabel: str
    x: np.ndarray | None = None
    y: np.ndarray | None = None


@dataclass(frozen=True)
class Line:
    label: str
    x: np.ndarray
    y: np.ndarray


@dataclass(frozen=True)
class Lines:
    title: str
    lines: tuple[Line, ...]
    xlabel: str
    ylabel: str
    steps: bool = False
    log_y: bool = False


Panel = Heatmap | Lines


@dataclass(frozen=True)
class Figure:
    title: str
    subtitle: str
    panels: tuple[Panel, ...]
    columns: int

    @property
    def rows(self) -> int:
        return -(-len(self.panels) // self.columns)
