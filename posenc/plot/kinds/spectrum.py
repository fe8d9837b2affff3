"""A per-index quantity across series: the wavelengths 2π/θ_i of rotary frequency schedules,
or plain values (ALiBi's per-head slopes); optionally each series relative to the first."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..declaration import PlotDeclaration
from ..figure import Figure, Line, Lines
from .shared import output, subtitle, title


def figure(decl: PlotDeclaration) -> Figure:
    options = decl.options
    wavelength = options.get("quantity", "wavelength") == "wavelength"
    default_y = "wavelength 2π/θᵢ (positions)" if wavelength else "value"
    lines = []
    for series in decl.series:
        values, factor = split(output(decl, series))
        y = wavelengths(values) if wavelength else values
        label = series.label
        if factor is not None and factor != 1.0:
            label += f" (attention factor {factor:.4g})"
        lines.append(Line(label, np.arange(y.size), y))
    panels = [Lines("", tuple(lines), options.get("xlabel", "index i"),
                    options.get("ylabel", default_y), log_y=options.get("log_y", True))]
    if options.get("ratio"):
        first = lines[0]
        ratios = tuple(Line(line.label, line.x, line.y / first.y) for line in lines
                       if line.y.shape == first.y.shape)
        panels.append(Lines(f"relative to {decl.series[0].label or 'the first'}", ratios,
                            options.get("xlabel", "index i"), "ratio", log_y=True))
    return Figure(title(decl), subtitle(decl), tuple(panels), columns=len(panels))


def split(out: Any) -> tuple[np.ndarray, float | None]:
    """The per-index values and, for a ``(values, factor)`` output, the scalar factor."""
    if isinstance(out, tuple):
        factor = out[1] if len(out) > 1 and isinstance(out[1], int | float) else None
        return np.ravel(np.asarray(out[0], float)), factor
    return np.ravel(np.asarray(out, float)), None


def wavelengths(inv_freq: np.ndarray) -> np.ndarray:
    """2π/θ, NaN (not drawn) where θ = 0 (a frequency a schedule switches off)."""
    with np.errstate(divide="ignore"):
        return np.where(inv_freq > 0, 2 * np.pi / np.where(inv_freq > 0, inv_freq, 1.0), np.nan)
