"""A rotary encoding's relative attention ⟨f(q, m), f(k, n)⟩ for q = k = 1: the logit of a
query at m and a key at n, divided by the head width, against m − n (RoPE's long-term
decay) or, on a grid of tokens, against the key's offset from a central query."""

from __future__ import annotations

import numpy as np

from ...errors import SpecError
from ..declaration import PlotDeclaration, Series
from ..figure import Figure, Heatmap, Line, Lines, Panel
from .shared import output, subtitle, title

DEFAULT_DISTANCE = 256
DEFAULT_HEAD_DIM = 64


def figure(decl: PlotDeclaration) -> Figure:
    options = decl.options
    grid = options.get("grid")
    if grid:
        positions, tokens, query = _grid_positions(grid, options.get("coordinates_axis", -1))
    else:
        positions, tokens, query = _line_positions(options.get("distance", DEFAULT_DISTANCE))
    panels: list[Panel] = []
    lines = []
    for series in decl.series:
        logits = relative_logits(decl, series, positions, tokens, query)
        if grid:
            panels.append(_grid_panel(decl, series.label, logits, grid))
        else:
            distance = positions[query] - positions  # m − n, query minus key
            lines.append(Line(series.label, distance[::-1], logits[::-1]))
    if lines:
        panels.append(Lines("", tuple(lines), "m − n (query − key position)",
                            "⟨f(1, m), f(1, n)⟩ / head_dim"))
    return Figure(title(decl), subtitle(decl), tuple(panels), columns=len(panels))


def relative_logits(decl: PlotDeclaration, series: Series, positions: np.ndarray, tokens: int,
                    query: int) -> np.ndarray:
    """Logits of token ``query`` against each of the ``tokens`` tokens at ``positions``,
    through the implementation."""
    head_dim = decl.options.get("head_dim", DEFAULT_HEAD_DIM)
    arrays = {"x": np.ones((tokens, head_dim)), "positions": positions}
    q = output(decl, series, decl.options.get("query_params"), inputs=arrays)
    k = output(decl, series, decl.options.get("key_params"), inputs=arrays)
    return k @ q[query] / head_dim


def _line_positions(distance: int) -> tuple[np.ndarray, int, int]:
    """Positions 0..distance, the query last."""
    return np.arange(distance + 1), distance + 1, distance


def _grid_positions(grid: list[int], axis: int) -> tuple[np.ndarray, int, int]:
    """Grid coordinates ([tokens, n_axes], or [n_axes, tokens] for axis 0), the query at
    the centre."""
    coordinates = np.indices(grid).reshape(len(grid), -1)
    centre = int(np.ravel_multi_index(tuple(s // 2 for s in grid), grid))
    return (coordinates if axis == 0 else coordinates.T), coordinates.shape[1], centre


def _grid_panel(decl: PlotDeclaration, label: str, logits: np.ndarray,
                grid: list[int]) -> Heatmap:
    kept = [a for a, size in enumerate(grid) if size > 1]
    if len(kept) != 2:
        raise SpecError(f"{decl.spec.path}: plot.options.grid {grid}: a heatmap needs exactly "
                        "two axes longer than 1")
    values = logits.reshape(grid).squeeze()
    rows, cols = (np.arange(grid[a]) - grid[a] // 2 for a in kept)
    return Heatmap(label, values, f"Δ grid axis {kept[1]} (key − query)",
                   f"Δ grid axis {kept[0]} (key − query)", x=cols, y=rows)
