"""Pictures of the encodings, computed by posenc's own implementations from the spec.

``figure(spec_id)`` gives the numbers of a spec's plot (:class:`~posenc.plot.figure.Figure`,
plain NumPy); ``plot(spec_id, path)`` draws them to a PNG with matplotlib (the ``plot``
extra), headless. What is drawn comes from the spec's ``plot:`` section (see
:mod:`posenc.plot.declaration`), or a default by family.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from ..errors import ParameterError, SpecError
from ..specs import load_spec, parse_value
from .declaration import PlotDeclaration, declaration, with_params
from .figure import Figure

__all__ = ["Figure", "PlotDeclaration", "declaration", "figure", "parse_params", "plot"]


def figure(spec_id: str, params: Mapping[str, Any] | None = None) -> Figure:
    """What the plot of ``spec_id`` shows, with ``params`` over the declared parameters."""
    from .kinds import KINDS

    decl = with_params(declaration(load_spec(spec_id)), params or {})
    return KINDS[decl.kind](decl)


def plot(spec_id: str, path: str | Path, params: Mapping[str, Any] | None = None, *,
         dpi: int = 100) -> Path:
    """Draw the plot of ``spec_id`` into the PNG ``path``; returns the path."""
    from .render import save_png

    return save_png(figure(spec_id, params), Path(path), dpi=dpi)


def parse_params(items: Iterable[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings (values as in a spec file: ``8``, ``5e5``, ``half``,
    ``{rope_type: llama3, factor: 8.0}``) as a mapping."""
    params: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ParameterError(f"--param {item!r}: expected KEY=VALUE")
        try:
            params[key.strip()] = parse_value(text)
        except (yaml.YAMLError, SpecError) as exc:
            raise ParameterError(f"--param {key.strip()}={text!r}: cannot parse the value: "
                                 f"{str(exc).splitlines()[0]}") from None
    return params
