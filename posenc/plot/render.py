"""Drawing a :class:`~posenc.plot.figure.Figure` to a PNG with matplotlib's Agg canvas.

matplotlib is an optional extra (``pip install 'posenc[plot]'``), imported only here. The
figure is drawn on an Agg canvas directly, never through pyplot, so it needs no display and
leaves matplotlib's global state alone.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import MissingExtraError
from .figure import Figure, Heatmap, Lines

PANEL_INCHES = (3.4, 2.8)
LINES_WIDTH = 5.0  # line plots get wider panels than heatmaps
TITLE_CHARS_PER_INCH = 14
STYLE = {"font.size": 7, "axes.titlesize": 8, "figure.titlesize": 9, "legend.fontsize": 6}
MASKED = "0.85"  # grey for entries that are not finite (a causal mask's −inf)
LEGEND_MAX = 10  # more lines than this go unlabelled
MARKERS_UP_TO = 100  # lines of at most this many points mark each point


def matplotlib() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise MissingExtraError("posenc plot", "matplotlib", "plot") from exc
    return matplotlib


def save_png(figure: Figure, path: Path, *, dpi: int = 100) -> Path:
    """Draw ``figure`` into ``path`` (a PNG) and return the path."""
    mpl = matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    width, height = PANEL_INCHES
    if any(isinstance(panel, Lines) for panel in figure.panels):
        width = LINES_WIDTH
    size = (width * figure.columns, height * figure.rows + 0.5)
    with mpl.rc_context(STYLE):
        canvas_figure = MplFigure(figsize=size, layout="constrained")
        FigureCanvasAgg(canvas_figure)
        axes = canvas_figure.subplots(figure.rows, figure.columns, squeeze=False).ravel()
        for ax, panel in zip(axes, figure.panels, strict=False):
            if isinstance(panel, Heatmap):
                _heatmap(mpl, canvas_figure, ax, panel)
            else:
                _lines(ax, panel)
        for ax in axes[len(figure.panels):]:
            ax.set_axis_off()
        chars = int(size[0] * TITLE_CHARS_PER_INCH)
        lines = textwrap.wrap(figure.title, chars) + textwrap.wrap(figure.subtitle, chars)
        canvas_figure.suptitle("\n".join(lines))
        canvas_figure.savefig(path, dpi=dpi, format="png", metadata={"Software": None})
    return path


def _heatmap(mpl: Any, canvas_figure: Any, ax: Any, panel: Heatmap) -> None:
    values = np.ma.masked_invalid(np.asarray(panel.values, float))
    finite = values.compressed()
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if low < 0 < high:  # signed values: a diverging map centred on 0
        bound = max(-low, high)
        cmap, low, high = "RdBu_r", -bound, bound
    else:
        cmap = "viridis"
    colormap = mpl.colormaps[cmap].with_extremes(bad=MASKED)
    rows, cols = values.shape
    x = panel.x if panel.x is not None else np.arange(cols)
    y = panel.y if panel.y is not None else np.arange(rows)
    extent = (x[0] - 0.5, x[-1] + 0.5, y[-1] + 0.5, y[0] - 0.5)
    image = ax.imshow(values, cmap=colormap, vmin=low, vmax=high, aspect="auto",
                      interpolation="nearest", extent=extent)
    canvas_figure.colorbar(image, ax=ax, shrink=0.9)
    ax.set(title=panel.title, xlabel=panel.xlabel, ylabel=panel.ylabel)


def _lines(ax: Any, panel: Lines) -> None:
    for line in panel.lines:
        few = line.x.size <= MARKERS_UP_TO and not panel.steps
        ax.plot(line.x, line.y, label=line.label or None, linewidth=0.9, marker="." if few else None,
                markersize=3, drawstyle="steps-mid" if panel.steps else "default")
    if panel.log_y:
        ax.set_yscale("log")
    labelled = [line for line in panel.lines if line.label]
    if labelled and len(panel.lines) <= LEGEND_MAX:
        ax.legend(loc="best", frameon=False)
    ax.grid(True, linewidth=0.3, alpha=0.5)
    ax.set(title=panel.title, xlabel=panel.xlabel, ylabel=panel.ylabel)
