"""Naming the likely bug behind a failing golden case, from the diagnoses its spec declares.

Each diagnosis is evaluated with the NumPy reference on the failing case (once per run: the
same case fails in every dtype and mode of a broken backend). A diagnosis *matches* when

1. its own output fails the golden under the tolerance of the run (a diagnosis that the case
   cannot tell from the correct answer explains nothing there), and
2. the backend's output agrees with it within that same tolerance, or, for floating outputs
   whose dtype adds errors of its own (float32 angles, bfloat16 rounding), lies at least
   ``CLOSER`` times closer to it than to the golden.

Matches are ranked by how well each explains the error pattern: the residual left after
subtracting the diagnosis's output from the backend's, as a fraction of the error itself
(root mean square over the elements). A bug whose error grows with the position (positions
in bfloat16) leaves almost nothing of the error when it is the bug, while a constant shift
(an off-by-one) leaves most of it; the message says what the leader leaves and what the
runner-up leaves. Strict matches (within tolerance) rank first, then the smallest residual,
then the declaration order; the other matches whose outputs agree with the winner's within
tolerance are listed as indistinguishable on this case.

A failing property is diagnosed the same way on its last call of the implementation, with
the reference's output on those inputs in place of a golden (:meth:`Diagnoser.explain_call`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from posenc import catalog
from posenc.diagnoses import Diagnosis, evaluate, fitted
from posenc.golden import GoldenCase, output_array
from posenc.specs import Spec, resolve_params

from . import rotary_bound
from .tolerances import Tolerance, compare, for_spec

CLOSER = 100.0


@dataclass
class Match:
    diagnosis: Diagnosis
    max_abs: float
    strict: bool
    overrides: dict[str, Any]
    indistinguishable: list[str] = field(default_factory=list)
    unexplained: float = 0.0  # rms(actual - diagnosis) / rms(actual - golden)
    runner_up: tuple[str, float] | None = None  # the next candidate and what it leaves
    where: str = ""  # "" for a golden case, else what the diagnosis was evaluated on
    whose: str = ""  # why posenc's inputs, not the implementation, explain it ("": they do not)
    fitted: dict[str, Any] = field(default_factory=dict)  # what a fitted transform read

    def record(self) -> dict[str, Any]:
        out = {"name": self.diagnosis.name, "title": self.diagnosis.title,
               "explanation": self.diagnosis.explained(self.fitted),
               "max_abs": self.max_abs, "also": list(self.indistinguishable),
               "unexplained": self.unexplained}
        if self.runner_up is not None:
            out["runner_up"] = {"name": self.runner_up[0], "unexplained": self.runner_up[1]}
        if self.where:
            out["on"] = self.where
        if self.whose:
            out["whose"] = self.whose
        if self.fitted:
            out["fitted"] = dict(self.fitted)
        return out

    def why(self) -> str:
        """Why this candidate leads: how much of the error it leaves, and the next one."""
        left = f"it leaves {_percent(self.unexplained)} of the error unexplained"
        if self.runner_up is None:
            return f"{left}; no other declared bug matches"
        name, rest = self.runner_up
        return f"{left}, the next candidate ({name}) {_percent(rest)}"

    def line(self) -> str:
        d = self.diagnosis
        to = "exactly" if self.max_abs == 0 else f"to {self.max_abs:.1e}"
        also = (f" (equally: {', '.join(self.indistinguishable)})"
                if self.indistinguishable else "")
        on = f" on {self.where}" if self.where else ""
        lead = (f"not the implementation's: posenc's inputs explain it ({self.whose}): "
                if self.whose else "likely: ")
        return f"{lead}{d.title} — output{on} matches " \
               f"{d.describe(self.overrides, self.fitted)} {to}: " \
               f"{d.explained(self.fitted)}{also}\nwhy it leads: {self.why()}"


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.3g}%" if fraction >= 1e-3 else "under 0.1%"


def _unexplained(actual: np.ndarray, out: np.ndarray, expected: np.ndarray) -> float:
    """The part of the error ``actual - expected`` that ``out`` leaves: rms(actual - out) /
    rms(actual - expected), over the elements finite in all three (0 when there is no error)."""
    a, o, e = (np.asarray(v, dtype=np.complex128 if np.iscomplexobj(v) else np.float64)
               for v in (actual, out, expected))
    finite = np.isfinite(a) & np.isfinite(o) & np.isfinite(e)
    error = float(np.sqrt(np.mean(np.abs(a - e)[finite] ** 2))) if finite.any() else 0.0
    if error == 0.0:
        return 0.0
    return float(np.sqrt(np.mean(np.abs(a - o)[finite] ** 2))) / error


class Diagnoser:
    """Evaluates a spec's diagnoses on failing cases, caching the reference outputs."""

    def __init__(self) -> None:
        self._outputs: dict[tuple[str, str, str], np.ndarray | None] = {}

    def output(self, spec: Spec, case: GoldenCase, diagnosis: Diagnosis) -> np.ndarray | None:
        """The reference's output under ``diagnosis`` (None where it cannot be evaluated: the
        changed parameters are invalid for this case, or the output has another shape); a
        fitted transform (a cache of N rows...) planted at its own choice for the case."""
        return self.fitted_output(spec, case, diagnosis)[0]

    def fitted_output(self, spec: Spec, case: GoldenCase, diagnosis: Diagnosis,
                      actual: np.ndarray | None = None
                      ) -> tuple[np.ndarray | None, dict[str, Any]]:
        """:meth:`output`, with a fitted transform fitted to ``actual`` (planted when None),
        and what was fitted (None output: nothing to fit)."""
        params = resolve_params(spec, case.params)
        try:
            fit = fitted(diagnosis, case.inputs, params, actual)
        except Exception:
            fit = None
        if fit is None:
            return None, {}
        key = (spec.id, case.name, diagnosis.name, repr(sorted(fit.items())))
        if key not in self._outputs:
            try:
                out = output_array(evaluate(diagnosis, catalog.reference_function(spec),
                                            case.inputs, params, fit))
            except Exception:
                out = None
            self._outputs[key] = out if out is not None and out.shape == case.output.shape \
                else None
        return self._outputs[key], fit

    def diagnose(self, spec: Spec, case: GoldenCase, actual: np.ndarray, tol: Tolerance, *,
                 scale: float, angle_bound: float = 0.0, bound: Any = None) -> Match | None:
        """The declared diagnosis the output matches best, or None. ``bound``: the case's
        per-element bound (:mod:`.rotary_bound`), used by every comparison."""
        if actual.shape != case.output.shape or not spec.diagnoses:
            return None
        exact = spec.output_kind == "int"

        def near(a: np.ndarray, b: np.ndarray) -> Any:  # every comparison under the case's bound
            return compare(a, b, tol, scale=scale, angle_bound=angle_bound, bound=bound)

        to_golden = None if exact else near(actual, case.output).max_abs
        matches: list[tuple[Match, np.ndarray]] = []
        for diagnosis in spec.diagnoses:
            out, fit = self.fitted_output(spec, case, diagnosis, actual)
            if out is None:
                continue
            if exact:
                if not np.array_equal(out, case.output) and np.array_equal(actual, out):
                    matches.append((Match(diagnosis, 0.0, True, diagnosis.params), out))
                continue
            if near(out, case.output).ok:
                continue  # this case cannot tell the diagnosis from the right answer
            result = near(actual, out)
            closer = (np.isfinite(result.max_abs) and to_golden is not None
                      and result.max_abs * CLOSER <= to_golden)
            if result.ok or closer:
                matches.append((Match(diagnosis, result.max_abs, result.ok, diagnosis.params,
                                      unexplained=_unexplained(actual, out, case.output),
                                      fitted=fit), out))
        if not matches:
            return None
        order = {d.name: i for i, d in enumerate(spec.diagnoses)}
        matches.sort(key=lambda m: (not m[0].strict, m[0].unexplained, m[0].max_abs,
                                    order[m[0].diagnosis.name]))
        best, best_out = matches[0]
        if len(matches) > 1:
            best.runner_up = (matches[1][0].diagnosis.name, matches[1][0].unexplained)
        for other, out in matches[1:]:
            same = np.array_equal(out, best_out) if exact else near(out, best_out).ok
            if same:
                best.indistinguishable.append(other.diagnosis.name)
        return best

    def explain_call(self, failure: Any, spec: Spec, call: tuple[dict[str, Any], dict[str, Any]],
                     actual: np.ndarray, tol: Tolerance,
                     supplied: dict[str, str] | None = None) -> None:
        """Diagnose a failing property from its last call of the implementation: ``call`` is
        (parameters, NumPy inputs), ``actual`` what the implementation returned. The reference's
        output on those inputs stands in for a golden; nothing is added when the call agrees
        with it (the property failed for another reason) or no diagnosis matches.

        Naming is judged under the exact profile of the run's dtype whatever profile the run
        asked: a conventional allowance is one bound over the call's farthest position, wide
        enough to hide a wrong factor at position 0 that the property itself caught (the
        ``CLOSER`` rule still admits float32 angles). Integer outputs compare exactly."""
        if not spec.diagnoses or "diagnosis" in failure.details:
            return
        exact = spec.output_kind == "int"
        if not exact and tol.profile != "exact":
            tol = for_spec(spec, tol.dtype)
        params, arrays = call
        inputs = {d.name: arrays.get(d.name) for d in spec.inputs}
        try:
            resolved = resolve_params(spec, params)
            reference = catalog.reference_function(spec)
            expected = output_array(reference(*inputs.values(), **resolved))
            bound = 0.0
            if spec.trigonometric:
                bound = float(catalog.reference_module(spec).angle_bound(*inputs.values(),
                                                                         **resolved))
        except Exception:  # the property called outside what the reference evaluates
            return
        if expected.shape != actual.shape or (exact and np.array_equal(actual, expected)):
            return
        floats = [np.abs(v).max(initial=0.0) for d in spec.inputs
                  if d.kind == "float" and (v := inputs.get(d.name)) is not None]
        scale = max([float(np.abs(expected[np.isfinite(expected)]).max(initial=0.0)), *floats])
        scale = scale or 1.0
        elements = rotary_bound.for_call(spec, params, inputs, expected, tol)
        if not exact and compare(actual, expected, tol, scale=scale, angle_bound=bound,
                                 bound=elements).ok:
            return
        digest = hashlib.sha256(repr(sorted(params.items())).encode())
        for value in inputs.values():
            digest.update(b"-" if value is None else np.ascontiguousarray(value).tobytes())
        case = GoldenCase(f"property call {digest.hexdigest()[:16]}", dict(params), inputs,
                          expected, bound)
        try:
            match = self.diagnose(spec, case, actual, tol, scale=scale, angle_bound=bound,
                                  bound=elements)
        except Exception:  # naming the bug must never change the verdict
            return
        if match is None:
            return
        match.where = "the property's last call"
        match.whose = (supplied or {}).get(match.diagnosis.name, "")
        failure.details["diagnosis"] = match.record()
        failure.add_note(match.line())

    def explain(self, failure: Any, spec: Spec, case: GoldenCase, actual: np.ndarray,
                tol: Tolerance, *, scale: float, angle_bound: float = 0.0,
                supplied: dict[str, str] | None = None, bound: Any = None) -> None:
        """Record the diagnosis in a CheckFailure's details (None when nothing matches) and add
        the ``likely:`` line to its message. ``supplied``: diagnosis -> why what posenc feeds
        the implementation (an adapter's inputs) explains it: then the line says so."""
        try:
            match = self.diagnose(spec, case, actual, tol, scale=scale, angle_bound=angle_bound,
                                  bound=bound)
        except Exception as exc:  # naming the bug must never change the verdict
            failure.details["diagnosis"] = None
            failure.add_note(f"(the diagnoses could not be evaluated: {exc!r})")
            return
        if match:
            match.whose = (supplied or {}).get(match.diagnosis.name, "")
        failure.details["diagnosis"] = match.record() if match else None
        if match:
            failure.add_note(match.line())
