"""What a backend provides: which checks run its own code, and which would only run posenc's.

A backend with ``overrides`` (an adapter of someone else's implementation) provides the
encodings it overrides, and the FlexAttention properties ``X_flex_score_mod`` whose factory
``X_score_mod`` it overrides. Everything else would check posenc's own code under the
backend's name, so it is planned as unsupported unless the run asks to include posenc's code
(``--include-posenc-code``), and then each result says who provided it. Backends whose
non-overridden encodings are their own (``Backend.own_code``, e.g. torch-triton: PyTorch plus one
kernel) and backends without overrides provide everything.
"""

from __future__ import annotations

from typing import Any

from posenc.backends.backend import Backend
from posenc.catalog import spec_for_function

FLEX_SUFFIX = "_flex_score_mod"


def _flex_factory(property_name: str) -> str | None:
    if property_name.endswith(FLEX_SUFFIX):
        return property_name[: -len(FLEX_SUFFIX)] + "_score_mod"
    return None


def provided_by(backend: Backend, spec: Any, kind: str, property_index: int = -1) -> str:
    """``"backend"`` when a check of ``spec`` runs the backend's own code, else ``"posenc"``."""
    if not backend.overrides or backend.own_code or spec.function in backend.overrides:
        return "backend"
    factory = (_flex_factory(spec.properties[property_index].name) if kind == "property"
               else None)
    return "backend" if factory in backend.overrides else "posenc"


def runs_posenc_code(backend: Backend, who: str) -> bool:
    """Whether a check runs posenc's own code: a backend without overrides (posenc's), one
    whose overrides are posenc's too (``own_code``), or a check ``provided_by`` posenc."""
    return not backend.overrides or backend.own_code or who == "posenc"


def not_provided_reason(backend: Backend) -> str:
    return (f"not provided by {backend.name}; posenc's own code would be checked "
            "(--include-posenc-code checks it, labelled provided_by: posenc)")


def out_of_scope(backend: Backend, function: str, params: dict[str, Any]) -> str | None:
    """The reason the backend declares these arguments out of its scope, or None. The scope is
    asked about the effective values: the call's parameters over the spec's defaults, so a
    declaration about a default value holds where a check leaves the parameter out."""
    if backend.scope is None:
        return None
    spec = spec_for_function(function)
    defaults = spec.defaults() if spec is not None else {}
    effective = {**params, **{k: v for k, v in defaults.items() if k not in params}}
    reason = backend.scope(function, effective)
    return str(reason) if reason else None


def conventions(backend: Backend, function: str) -> str | None:
    """The position conventions an adapter converts (offset, xPos centre), or None."""
    override = backend.overrides.get(function)
    return getattr(override, "posenc_conventions", None) if override is not None else None


def posenc_supplies(backend: Backend, function: str) -> str | None:
    """What posenc computes for an adapter's override (e.g. cos/sin for ``apply(q, k, cos,
    sin)``), recorded with its results; None for a self-contained implementation."""
    override = backend.overrides.get(function)
    supplied = getattr(override, "posenc_supplies", None) if override is not None else None
    return supplied() if callable(supplied) else supplied  # a note that varies per call


def posenc_explains(backend: Backend, function: str) -> dict[str, str]:
    """Declared diagnoses that what posenc feeds an adapter's override would explain (cos/sin
    it supplies in q's dtype), each with the reason: such a match is posenc's, not the
    implementation's."""
    override = backend.overrides.get(function)
    return dict(getattr(override, "posenc_explains", None) or {}) if override is not None else {}
