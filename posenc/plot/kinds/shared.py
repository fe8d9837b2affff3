"""What every plot kind does: evaluate one series, describe the parameters drawn."""

from __future__ import annotations

from typing import Any

from ..declaration import PlotDeclaration, Series
from ..implementation import call
from ..inputs import materialise


def output(decl: PlotDeclaration, series: Series, extra: dict[str, Any] | None = None,
           inputs: dict[str, Any] | None = None) -> Any:
    """The encoding's output for one series: its params (plus ``extra``) and inputs (the
    declared plot inputs, or ``inputs``: arrays a kind builds itself)."""
    arrays = materialise(decl.spec, decl.series_inputs(series))
    arrays.update(inputs or {})
    return call(decl.spec, arrays, {**decl.series_params(series), **(extra or {})})


def title(decl: PlotDeclaration) -> str:
    return f"{decl.spec.id}: {decl.spec.title}"


def subtitle(decl: PlotDeclaration, limit: int = 110) -> str:
    """The parameters common to every series, shortened to ``limit`` characters."""
    text = ", ".join(f"{k}={_short(v)}" for k, v in decl.params.items())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _short(value: Any) -> str:
    if isinstance(value, dict):
        kind = value.get("rope_type", value.get("type"))
        return f"{{{kind}…}}" if kind else "{…}"
    if isinstance(value, list) and len(value) > 4:
        return f"[{len(value)} values]"
    return repr(value) if isinstance(value, str) else str(value)
