"""Planning and executing conformance checks: backend × device × dtype × mode × encoding × check."""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from posenc.backends import get_backend, installed_backends
from posenc.backends.backend import FLOAT_DTYPES, SETTINGS, Backend
from posenc.backends.pairing import conversion_of
from posenc.catalog import specs
from posenc.errors import ParameterError, PosencError, SpecError
from posenc.golden import GoldenCase

from . import comparisons, grading, messages, rotary_bound, scope, selection, tiers, tolerances, whose
from .case_scale import case_scale
from .context import CheckFailure, Context, Unsupported, UpstreamFailure
from .diagnose import Diagnoser
from .golden_gate import GoldenCaseError, VerifiedGolden, verify
from .gradients import check_gradient, differentiable, pick_case
from .properties import get_property, known_properties
from .tolerances import PROFILES, Tolerance

MODES = ("eager", "compiled")
FAILING = ("fail", "error")


@dataclass
class Options:
    backends: list[str | Backend] = field(default_factory=list)  # empty: every installed one
    encodings: list[str] = field(default_factory=list)  # empty: every spec
    dtypes: list[str] = field(default_factory=list)  # empty: every dtype the backend has
    modes: list[str] = field(default_factory=lambda: list(MODES))
    device: str = "cpu"
    max_examples: int = 25
    cases: bool = True
    properties: bool = True
    gradients: bool = True  # autodiff vs finite differences (float64, eager, one case per spec)
    # check-id pattern -> reason; skip: patterns deselected from the plan. A pattern is a glob
    # over the id, or selects by parameter values: rope[layout=interleaved] (selection.py)
    expectations: dict[str, str] = field(default_factory=dict)
    skip: list[str] = field(default_factory=list)
    # compiled mode checks only the first N golden cases of each spec (None: all of them)
    compiled_cases: int | None = None
    precision: str = "exact"  # the profile a check must meet: exact | conventional | reduced
    # "exhaustive": the full plan; "standard": every group, fewer checks (conformance/tiers.py;
    # the CLI's default)
    tier: str = "exhaustive"
    # check posenc's own code for the encodings an override backend does not provide
    include_posenc_code: bool = False
    # framework settings the checks run under, where the user asks (backend.SETTINGS:
    # {"matmul_precision": "highest"}); unnamed ones stay as the caller has them
    settings: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Check:
    backend: str
    device: str
    dtype: str
    mode: str
    encoding: str
    kind: str  # "case", "property", "gradient" or "capability"
    name: str  # case name, property label, or what is missing
    property_index: int = -1

    @property
    def id(self) -> str:
        return "/".join((self.backend, self.device, self.dtype, self.mode, self.encoding,
                         f"{self.kind}:{self.name}"))


@dataclass
class Result:
    check: Check
    status: str  # pass | fail | error | unsupported | xfail | xpass
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    grade: str | None = None  # the tightest precision profile met (None: none, or not run)
    provided_by: str | None = None  # "backend", or "posenc" for posenc's own code

    @property
    def failed(self) -> bool:
        return self.status in FAILING


def check_settings(settings: dict[str, str]) -> None:
    """Raise ParameterError for a framework setting posenc does not know (backend.SETTINGS)."""
    for key, value in settings.items():
        if value not in SETTINGS.get(key, ()):
            raise ParameterError(f"Options.settings[{key!r}]={value!r}: known settings: "
                                 + "; ".join(f"{k}: {', '.join(v)}" for k, v in SETTINGS.items()))


class Runner:
    """Plans and executes checks, holding backend sessions, goldens and compiled functions."""

    def __init__(self, options: Options) -> None:
        self.options = options
        if options.precision not in PROFILES:
            raise ParameterError(f"Options.precision={options.precision!r}: not a precision "
                                 f"profile (known: {', '.join(PROFILES)})")
        check_settings(options.settings)
        resolved = [get_backend(b) for b in options.backends or installed_backends()]
        for backend in resolved:  # a named peer adapter whose peer is missing: say so once
            if hasattr(backend, "missing") and backend.missing() is not None:
                backend.namespace()
        self.backends: dict[str, Backend] = {b.name: b for b in resolved}
        if "tensorflow" in self.backends and "torch" in self.backends:
            with contextlib.suppress(ImportError):
                import torch  # noqa: F401 - torch must be imported before TensorFlow
        all_specs = specs()
        unknown = [e for e in options.encodings if e not in all_specs]
        if unknown:
            raise SpecError(f"unknown encoding(s) {unknown} (known: {', '.join(all_specs)})")
        self.specs = {k: v for k, v in all_specs.items()
                      if not options.encodings or k in options.encodings}
        for spec in self.specs.values():
            for i, prop in enumerate(spec.properties):
                if prop.name not in known_properties():
                    raise SpecError(
                        f"{spec.path}: properties[{i}].name: unknown property {prop.name!r} "
                        f"(known: {', '.join(sorted(known_properties()))})")
        self._stack = contextlib.ExitStack()
        self._sessions: set[str] = set()
        self._goldens: dict[str, VerifiedGolden] = {}
        self._compiled: dict[tuple[str, str, str, str], dict[Any, Any]] = {}
        self._diagnoser = Diagnoser()
        self.deselected = 0  # set by plan()

    # -- planning --------------------------------------------------------------------------
    def plan(self) -> list[Check]:
        """The checks the options select, in order; ``self.deselected`` then counts those
        that ``skip`` and ``compiled_cases`` left out of the plan."""
        opts = self.options
        checks: list[Check] = []
        for bname, backend in self.backends.items():
            for dtype in opts.dtypes or [d for d in FLOAT_DTYPES if d in backend.dtypes]:
                for mode in opts.modes:
                    for spec in self.specs.values():
                        base = (bname, opts.device, dtype, mode, spec.id)
                        if dtype not in backend.dtypes:
                            checks.append(Check(*base, "capability", f"dtype {dtype}"))
                        elif mode == "compiled" and backend.compile is None:
                            checks.append(Check(*base, "capability", "compiled mode"))
                        elif backend.functions is not None and spec.function not in backend.functions:
                            checks.append(Check(*base, "capability", f"layer for {spec.function}"))
                        else:
                            checks.extend(self._plan_spec(base, spec))
        if opts.tier not in tiers.TIERS:
            raise ParameterError(f"tier={opts.tier!r} is not one of {', '.join(tiers.TIERS)}")
        case_order = {s.id: [c.name for c in s.cases] for s in self.specs.values()}
        if opts.tier == "standard":
            checks = tiers.select(checks, case_order)
        kept = [c for c in checks if not self._deselects(c, case_order)]
        self.deselected = len(checks) - len(kept)
        return kept

    def _deselects(self, check: Check, case_order: dict[str, list[str]]) -> bool:
        """Whether ``--compiled-cases`` or a ``--skip`` pattern leaves ``check`` out."""
        limit = self.options.compiled_cases
        if (limit is not None and check.kind == "case" and check.mode == "compiled"
                and case_order[check.encoding].index(check.name) >= limit):
            return True
        return any(selection.selects(pattern, check, self.specs) for pattern in self.options.skip)

    def _plan_spec(self, base: tuple[str, ...], spec: Any) -> list[Check]:
        out = []
        if self.options.cases:
            out += [Check(*base, "case", c.name) for c in spec.cases]
        if self.options.properties:
            out += [Check(*base, "property", p.label, i) for i, p in enumerate(spec.properties)]
        backend = self.backends[base[0]]
        if (self.options.gradients and backend.vjp is not None and base[2] == "float64"
                and base[3] == "eager" and differentiable(spec)):
            out.append(Check(*base, "gradient", "autodiff"))
        return out

    # -- execution -------------------------------------------------------------------------
    def _enter(self, backend: Backend) -> None:
        if backend.name not in self._sessions:
            backend.namespace()  # MissingFrameworkError with the pip extra
            self._stack.enter_context(backend.session())
            self._sessions.add(backend.name)

    def _golden(self, spec_id: str) -> VerifiedGolden:
        """The spec's golden, verified once before any backend is judged against it."""
        if spec_id not in self._goldens:
            self._goldens[spec_id] = verify(self.specs[spec_id])
        return self._goldens[spec_id]

    def _tolerance(self, check: Check, profile: str) -> Tolerance:
        return tolerances.for_spec(self.specs[check.encoding], check.dtype, profile)

    def _context(self, check: Check, backend: Backend, profile: str = "exact") -> Context:
        spec = self.specs[check.encoding]
        key = (check.backend, check.dtype, check.mode, check.encoding)
        return Context(backend=backend, spec=spec, dtype=check.dtype, mode=check.mode,
                       device=check.device, tol=self._tolerance(check, profile),
                       max_examples=self.options.max_examples,
                       _compiled=self._compiled.setdefault(key, {}))

    def _settings(self, check: Check, backend: Backend) -> contextlib.AbstractContextManager[Any]:
        """The framework settings a check runs under (backend.settings), for a check that
        runs at all on an installed framework."""
        if check.kind == "capability" or check.dtype not in backend.dtypes:
            return contextlib.nullcontext()
        try:
            backend.namespace()
        except PosencError:  # the check reports it
            return contextlib.nullcontext()
        spec = self.specs[check.encoding]
        own = scope.runs_posenc_code(backend, scope.provided_by(backend, spec, check.kind,
                                                                check.property_index))
        return backend.settings(check.dtype, own, self.options.settings)

    def execute(self, check: Check) -> Result:
        start = time.perf_counter()
        backend = self.backends[check.backend]
        with self._settings(check, backend) as in_force:
            result = grading.graded(
                lambda profile: self._execute(check, profile), self.options.precision,
                check.kind, lambda a, b: self._tolerance(check, a) != self._tolerance(check, b))
        if in_force and result.status != "unsupported":
            result.details["settings"] = in_force
        result.seconds = time.perf_counter() - start
        for pattern, reason in {**backend.expectations, **self.options.expectations}.items():
            if selection.selects(pattern, check, self.specs):
                if result.details.get("blame") == "golden":  # no backend verdict to expect
                    break
                if result.failed:
                    result.status, result.message = "xfail", f"{reason} ({result.message})"
                elif result.status == "pass":
                    result.status, result.message = "xpass", f"expected to fail: {reason}"
                break
        if check.kind == "case" and check.encoding in self._goldens:
            result.details.update(self._goldens[check.encoding].notes())
        return result

    def _execute(self, check: Check, profile: str = "exact") -> Result:
        backend = self.backends[check.backend]
        if check.kind == "capability":
            return Result(check, "unsupported", f"backend {check.backend!r} has no {check.name}")
        spec = self.specs[check.encoding]
        who = scope.provided_by(backend, spec, check.kind, check.property_index)
        if who == "posenc" and not self.options.include_posenc_code:
            return Result(check, "unsupported", scope.not_provided_reason(backend))
        if check.kind == "property" and (why := comparisons.property_not_applicable(
                backend, spec, spec.properties[check.property_index].name)):
            return Result(check, "unsupported", why)
        ctx: Context | None = None
        raised: BaseException | None = None
        if pairing := conversion_of(backend, spec.function):
            pairing.take_log()  # what this check's calls convert, recorded with its result
        try:
            self._enter(backend)
            if check.device not in backend.devices():
                return Result(check, "unsupported", f"no device {check.device!r} on this machine "
                              f"(backend {backend.name!r} has: {', '.join(backend.devices())})")
            ctx = self._context(check, backend, profile)
            how: dict[str, Any] = {}
            if check.kind == "case":
                how = self._check_case(ctx, check.name)
            elif check.kind == "gradient":
                case = pick_case(ctx.spec, self._golden(ctx.spec.id).cases)
                if case is None:
                    return Result(check, "unsupported", "no golden case with real output")
                check_gradient(ctx, case)
            else:
                decl = ctx.spec.properties[check.property_index]
                ctx.params, ctx.args = dict(decl.params), dict(decl.args)
                get_property(decl.name)(ctx)
            result = Result(check, "pass", details=how)
        except Unsupported as exc:
            result = Result(check, "unsupported", str(exc))
        except GoldenCaseError as exc:  # blames the golden, not the backend
            result = whose.record(Result(check, "error", str(exc), exc.details), whose.GOLDEN,
                                  "the golden case fails posenc's own verification")
        except UpstreamFailure as exc:
            result = whose.record(Result(check, "xfail", str(exc)), whose.FRAMEWORK,
                                  "its control, with no code under test, fails here")
        except NotImplementedError as exc:  # posenc.Unsupported too: out of the adapter's scope
            reason = str(exc) or type(exc).__name__
            result = Result(check, "unsupported", f"{reason} (raised at {messages.last_frame(exc)})")
        except CheckFailure as exc:
            if check.kind == "property" and ctx is not None and ctx.last_output is not None \
                    and ctx.last_call is not None:  # which declared bug its last call shows
                self._diagnoser.explain_call(exc, ctx.spec, (ctx.last_call[0], ctx.last_inputs),
                                             ctx.last_output, ctx.tol,
                                             scope.posenc_explains(backend, spec.function))
                if "diagnosis" not in exc.details:
                    self._explain_call_in_own_pairing(exc, ctx)
            result = messages.failure(Result(check, "fail", _with_notes(exc), dict(exc.details)),
                                      ctx)
        except PosencError as exc:
            raised = exc
            result = messages.failure(
                Result(check, "error", f"{type(exc).__name__}: {_with_notes(exc)}"), ctx, exc)
        except Exception as exc:  # a backend bug must not stop the run
            raised = exc
            text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            result = messages.failure(Result(check, "error", text), ctx, exc)
        result.provided_by = who
        if pairing and (converted := pairing.take_log()):
            result.details["pairing"] = converted
        return _annotated(result, backend, spec, who, raised)

    def _check_case(self, ctx: Context, name: str) -> dict[str, Any]:
        case = self._golden(ctx.spec.id).case(name)
        if np.iscomplexobj(case.output):
            ctx.require_complex()
        actual = ctx.run(case.inputs, **case.params)
        if actual.shape != case.output.shape:
            raise CheckFailure(f"shape {actual.shape}, expected {case.output.shape}")
        scale = case_scale(ctx.spec, case)  # the output's magnitude and sensitivity
        compared, expected, how = comparisons.prepare(ctx.backend, ctx.spec, actual, case.output)
        bound = rotary_bound.for_case(ctx.spec, case, ctx.tol)  # None: the case-wide tolerance
        try:
            if ctx.spec.output_kind == "int":
                ctx.assert_equal(actual, case.output, f"case {name!r}")
            else:
                seen = ctx.assert_close(compared, expected, f"case {name!r}" + (
                    f" ({how['comparison']})" if how else ""), scale=scale,
                                        angle_bound=case.angle_bound, bound=bound)
                if seen.elements is not None:  # what the per-element bound judged
                    how = {**how, "elements": seen.elements}
        except CheckFailure as exc:  # which declared bug (diagnoses:) the output matches
            exc.details.update(how)
            self._diagnoser.explain(exc, ctx.spec, case, actual, ctx.tol, scale=scale,
                                    angle_bound=case.angle_bound, bound=bound,
                                    supplied=scope.posenc_explains(ctx.backend, ctx.spec.function))
            if not exc.details.get("diagnosis"):
                self._explain_in_own_pairing(exc, ctx, case, actual, scale)
            raise
        return how

    def _explain_in_own_pairing(self, exc: CheckFailure, ctx: Context, case: GoldenCase,
                                actual: np.ndarray, scale: float) -> None:
        """A case that ran through the pairing permutation, diagnosed as the implementation met
        it (a layout swap shows as one only in its own pairing)."""
        pairing = conversion_of(ctx.backend, ctx.spec.function)
        own = pairing.in_own_pairing(case.params, case.inputs, case.output) if pairing else None
        if own is None:
            return
        params, inputs, to_own = own
        seen = GoldenCase(f"{case.name} [{pairing.layout}]", params, inputs,
                          to_own(case.output), case.angle_bound)
        self._diagnoser.explain(exc, ctx.spec, seen, to_own(actual), ctx.tol, scale=scale,
                                angle_bound=case.angle_bound,
                                bound=rotary_bound.for_case(ctx.spec, seen, ctx.tol),
                                supplied=scope.posenc_explains(ctx.backend, ctx.spec.function))
        if exc.details.get("diagnosis"):
            exc.details["diagnosis"]["pairing"] = pairing.layout
            exc.add_note(f"(named on the case as the implementation ran it: {pairing.own_view})")

    def _explain_call_in_own_pairing(self, exc: CheckFailure, ctx: Context) -> None:
        """A property's last call that ran through a conversion, diagnosed as the
        implementation met it (the same for a property as for a case)."""
        pairing = conversion_of(ctx.backend, ctx.spec.function)
        if pairing is None or ctx.last_call is None or ctx.last_output is None:
            return
        own = pairing.in_own_pairing(ctx.last_call[0], ctx.last_inputs, ctx.last_output)
        if own is None:
            return
        params, inputs, to_own = own
        self._diagnoser.explain_call(exc, ctx.spec, (params, inputs), to_own(ctx.last_output),
                                     ctx.tol, scope.posenc_explains(ctx.backend, ctx.spec.function))
        if exc.details.get("diagnosis"):
            exc.details["diagnosis"]["pairing"] = pairing.layout
            exc.add_note(f"(named on the call as the implementation ran it: {pairing.own_view})")

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _annotated(result: Result, backend: Backend, spec: Any, who: str,
               raised: BaseException | None) -> Result:
    """``result`` with the conventions converted, what posenc supplied, and for a failure
    whose it is (the implementation, the framework, the golden)."""
    if (converts := scope.conventions(backend, spec.function)) and result.status != "unsupported":
        result.details["conventions"] = converts
    if supplied := scope.posenc_supplies(backend, spec.function):
        result.details.setdefault("posenc_supplies", supplied)
    if result.failed and "whose" not in result.details:
        whose.record(result, *(
            (whose.IMPLEMENTATION, "posenc's own code is the implementation here")
            if scope.runs_posenc_code(backend, who)
            else whose.of_error(raised) if raised is not None
            else whose.of_failure(result.details)))
    return result


def _with_notes(exc: BaseException, text: str | None = None) -> str:
    return "\n".join([messages.plain(text or str(exc)), *messages.notes(exc)])


def plan(options: Options) -> list[Check]:
    with Runner(options) as runner:
        return runner.plan()


def run(options: Options, progress: Callable[[int, int, Check], None] | None = None,
        checks: Iterable[Check] | None = None) -> list[Result]:
    """Plan (unless ``checks`` are given) and execute every check; results in plan order."""
    with Runner(options) as runner:
        todo = list(checks) if checks is not None else runner.plan()
        results = []
        for i, check in enumerate(todo):
            if progress:
                progress(i, len(todo), check)
            results.append(runner.execute(check))
        if progress:
            progress(len(todo), len(todo), None)  # type: ignore[arg-type]
        return results
