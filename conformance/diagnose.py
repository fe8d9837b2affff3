"""Naming the likely bug behind a failing golden case, from the diagnoses its spec declares.

Each diagnosis is evaluated with the NumPy reference on the failing case (once per run: the
same case fails in every dtype and mode of a broken backend). A diagnosis *matches* when

1. its own output fails the golden under the tolerance of the run (a diagnosis that the case
   cannot tell from the correct answer explains nothing there), and
2. the backend's output agrees with it within that same tolerance, or, for floating outputs
   whose dtype adds errors of its own (float32 angles, bfloat16 rounding), lies at least
   ``CLOSER`` times closer to it than to the golden.

Among matches the strict ones win, then the smallest max abs error, then the declaration
order; the other matches whose outputs agree with the winner's within tolerance are listed as
indistinguishable on this case.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from posenc import catalog
from posenc.diagnoses import Diagnosis, evaluate
from posenc.golden import GoldenCase, output_array
from posenc.specs import Spec, resolve_params

from .tolerances import Tolerance, compare

CLOSER = 100.0


@dataclass
class Match:
    diagnosis: Diagnosis
    max_abs: float
    strict: bool
    overrides: dict[str, Any]
    indistinguishable: list[str] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        return {"name": self.diagnosis.name, "title": self.diagnosis.title,
                "explanation": self.diagnosis.explanation,
                "max_abs": self.max_abs, "also": list(self.indistinguishable)}

    def line(self) -> str:
        d = self.diagnosis
        to = "exactly" if self.max_abs == 0 else f"to {self.max_abs:.1e}"
        also = (f" (equally: {', '.join(self.indistinguishable)})"
                if self.indistinguishable else "")
        return f"likely: {d.title} — output matches {d.describe(self.overrides)} {to}: " \
               f"{d.explanation}{also}"


class Diagnoser:
    """Evaluates a spec's diagnoses on failing cases, caching the reference outputs."""

    def __init__(self) -> None:
        self._outputs: dict[tuple[str, str, str], np.ndarray | None] = {}

    def output(self, spec: Spec, case: GoldenCase, diagnosis: Diagnosis) -> np.ndarray | None:
        """The reference's output under ``diagnosis`` (None where it cannot be evaluated: the
        changed parameters are invalid for this case, or the output has another shape)."""
        key = (spec.id, case.name, diagnosis.name)
        if key not in self._outputs:
            params = resolve_params(spec, case.params)
            try:
                out = output_array(evaluate(diagnosis, catalog.reference_function(spec),
                                            case.inputs, params))
            except Exception:
                out = None
            self._outputs[key] = out if out is not None and out.shape == case.output.shape \
                else None
        return self._outputs[key]

    def diagnose(self, spec: Spec, case: GoldenCase, actual: np.ndarray, tol: Tolerance, *,
                 scale: float, angle_bound: float = 0.0) -> Match | None:
        """The declared diagnosis the output matches best, or None."""
        if actual.shape != case.output.shape or not spec.diagnoses:
            return None
        exact = spec.output_kind == "int"
        to_golden = None if exact else compare(actual, case.output, tol, scale=scale,
                                               angle_bound=angle_bound).max_abs
        matches: list[tuple[Match, np.ndarray]] = []
        for diagnosis in spec.diagnoses:
            out = self.output(spec, case, diagnosis)
            if out is None:
                continue
            if exact:
                if not np.array_equal(out, case.output) and np.array_equal(actual, out):
                    matches.append((Match(diagnosis, 0.0, True, diagnosis.params), out))
                continue
            if compare(out, case.output, tol, scale=scale, angle_bound=angle_bound).ok:
                continue  # this case cannot tell the diagnosis from the right answer
            result = compare(actual, out, tol, scale=scale, angle_bound=angle_bound)
            closer = (np.isfinite(result.max_abs) and to_golden is not None
                      and result.max_abs * CLOSER <= to_golden)
            if result.ok or closer:
                matches.append((Match(diagnosis, result.max_abs, result.ok, diagnosis.params),
                                out))
        if not matches:
            return None
        order = {d.name: i for i, d in enumerate(spec.diagnoses)}
        matches.sort(key=lambda m: (not m[0].strict, m[0].max_abs, order[m[0].diagnosis.name]))
        best, best_out = matches[0]
        for other, out in matches[1:]:
            same = (np.array_equal(out, best_out) if exact
                    else compare(out, best_out, tol, scale=scale, angle_bound=angle_bound).ok)
            if same:
                best.indistinguishable.append(other.diagnosis.name)
        return best

    def explain(self, failure: Any, spec: Spec, case: GoldenCase, actual: np.ndarray,
                tol: Tolerance, *, scale: float, angle_bound: float = 0.0) -> None:
        """Record the diagnosis in a CheckFailure's details (None when nothing matches) and add
        the ``likely:`` line to its message."""
        try:
            match = self.diagnose(spec, case, actual, tol, scale=scale, angle_bound=angle_bound)
        except Exception as exc:  # naming the bug must never change the verdict
            failure.details["diagnosis"] = None
            failure.add_note(f"(the diagnoses could not be evaluated: {exc!r})")
            return
        failure.details["diagnosis"] = match.record() if match else None
        if match:
            failure.add_note(match.line())
