"""Comparisons other than value for value, where a spec makes something else the contract.

``softmax_equivalent``: a bias is judged by the softmax it induces, so two biases that differ
by a constant along each query row (the last axis) are the same. alibi_bias's spec says so
(key_only differs from causal by ``m_h * i``; MPT's and keras-hub's ``m·(j − (k_len − 1))``
by ``m_h * (k_len − 1 − i)``). Both sides are compared after subtracting their row maxima,
with the case's own tolerance and scale, and the result says it was compared that way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from posenc.backends.backend import Backend
from posenc.errors import SpecError

SOFTMAX_EQUIVALENT = "softmax_equivalent"
# specs whose contract is the softmax of each query row (see their conventions)
SOFTMAX_CONTRACT = frozenset({"alibi_bias"})
# their properties that judge raw values, which a softmax-equivalent bias need not meet
VALUE_PROPERTIES = {"alibi_bias": frozenset({"alibi_bias_relative"})}


def declared(backend: Backend, spec: Any) -> str | None:
    """The comparison ``backend`` declares for ``spec``'s function (None: value for value)."""
    how = backend.comparisons.get(spec.function)
    if how is None:
        return None
    if how != SOFTMAX_EQUIVALENT:
        raise SpecError(f"backend {backend.name!r}: comparisons[{spec.function!r}]={how!r} "
                        f"(known: {SOFTMAX_EQUIVALENT!r})")
    if spec.id not in SOFTMAX_CONTRACT:
        raise SpecError(f"backend {backend.name!r} compares {spec.id} up to a per-row constant, "
                        f"but the spec's contract is its values (softmax-equivalence holds for "
                        f"{', '.join(sorted(SOFTMAX_CONTRACT))})")
    return how


def property_not_applicable(backend: Backend, spec: Any, property_name: str) -> str | None:
    """Why a property does not apply to a backend compared softmax-equivalent (None: it does)."""
    if declared(backend, spec) is None or property_name not in VALUE_PROPERTIES.get(spec.id, ()):
        return None
    return (f"{property_name} judges raw values; {backend.name} is compared "
            f"{SOFTMAX_EQUIVALENT} (its rows may differ from the spec's by a constant)")


def row_normalised(values: np.ndarray) -> np.ndarray:
    """``values`` minus the largest finite entry of each row (rows with none: unchanged)."""
    values = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(values)
    top = np.max(values, axis=-1, keepdims=True, initial=-np.inf, where=finite)
    return values - np.where(np.isfinite(top), top, 0.0)


def prepare(backend: Backend, spec: Any, actual: np.ndarray, expected: np.ndarray,
            ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """The arrays to compare for a golden case, and the details saying how they were compared."""
    if declared(backend, spec) is None:
        return actual, expected, {}
    if actual.shape != expected.shape:
        return actual, expected, {}
    return (row_normalised(actual), row_normalised(expected),
            {"comparison": SOFTMAX_EQUIVALENT})
