"""``check``: run a spec's golden cases and properties on ONE implementation, a function with
its own signature, and say what is in scope, what passes, under which precision profile, and
which known bug a failure matches. ``posenc check`` is its command line."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posenc.backends import adapters
from posenc.backends.backend import FLOAT_DTYPES, Backend
from posenc.catalog import specs
from posenc.errors import ParameterError

from . import dtype_probe, findings
from . import named as named_checks
from .reports import report
from .runner import Options, Result, check_settings, run
from .tolerances import PROFILES

_DECLARED = re.compile(r"^out of .*?'s declared scope: ")


@dataclass
class CheckReport:
    """The results of :func:`check`, and how they read."""

    implementation: str
    results: list[Result]
    precision: str
    dtype_choice: str = ""  # which dtypes were checked and why (the probe's plan lines)

    @property
    def settings(self) -> list[str]:
        """The framework settings the checks ran under, one line each (backend.settings)."""
        return report.settings(self.results)

    @property
    def failed(self) -> list[Result]:
        return [r for r in self.results if r.failed]

    @property
    def passed(self) -> bool:
        """Every check in scope passes the profile asked for (and at least one is in scope)."""
        return not self.failed and self.in_scope > 0

    @property
    def in_scope(self) -> int:
        return sum(r.status != "unsupported" for r in self.results)

    @property
    def grade(self) -> str | None:
        """The tightest precision profile every graded check in scope meets (None: some check
        meets none, or nothing was graded)."""
        graded = [r for r in self.results if r.status not in ("unsupported", "xfail", "unjudgeable")
                  and r.check.kind in ("case", "property")]
        if not graded or any(r.grade is None for r in graded):
            return None
        return max((r.grade for r in graded), key=PROFILES.index)

    @property
    def unsupported(self) -> dict[str, int]:
        """Why checks are out of scope: reason -> how many."""
        out: dict[str, int] = {}
        for r in self.results:
            if r.status == "unsupported":
                reason = _DECLARED.sub("", r.message.split(" (raised at ")[0])
                if reason.startswith("it takes no "):  # one line per parameter, not per value
                    reason = reason.split(" (")[0]
                out[reason] = out.get(reason, 0) + 1
        return out

    def text(self, verbose: bool = False) -> str:
        blind = sum(r.status == "unjudgeable" for r in self.results)
        parts = [f"{self.implementation}: {self.in_scope} of {len(self.results)} checks in scope"
                 f"{f' ({blind} not judgeable)' if blind else ''}; "
                 f"grade: {self.grade or 'none'} (asked: {self.precision})"]
        parts += [f"  {line}" for line in self.dtype_choice.splitlines()]
        parts += [f"  settings: {line}" for line in self.settings]
        supplied = {r.details["posenc_supplies"] for r in self.results
                    if r.details.get("posenc_supplies")}
        parts += [f"  posenc supplies: {text}" for text in sorted(supplied)]
        converted: dict[str, int] = {}
        for r in self.results:
            for key in ("pairing", "conventions"):
                if r.details.get(key) and r.status != "unsupported":
                    converted[r.details[key]] = converted.get(r.details[key], 0) + 1
        parts += [f"  converted ({n}): {text}" for text, n in sorted(converted.items())]
        reasons = sorted(self.unsupported.items(), key=lambda item: -item[1])
        shown = reasons if verbose else reasons[:8]
        parts += [f"  unsupported ({n}): {reason}" for reason, n in shown]
        if len(reasons) > len(shown):
            parts.append(f"  ... and {len(reasons) - len(shown)} more reasons (verbose=True)")
        failures = report.failures(self.results, limit=None if verbose else 10)
        if failures:
            parts.append(failures)
        if grouped := findings.text(self.results):
            parts.append(grouped)
        parts.append(report.closing_line(self.results))
        return "\n".join(parts)

    def __str__(self) -> str:
        return self.text()

    def to_json(self, path: str | Path) -> None:
        report.to_json(self.results, Path(path), {"implementation": self.implementation,
                                                  "precision": self.precision,
                                                  "dtype_choice": self.dtype_choice})


def _backend(implementation: Any, encoding: str | None, names: Mapping[str, str] | None,
             unsupported: Mapping[str, Any] | None, framework: str | None,
             dtypes: Iterable[str] | None, name: str | None, compiled: bool,
             conventions: Mapping[str, Any]) -> Backend:
    if conventions and (not callable(implementation) or isinstance(
            implementation, Backend | adapters.Adapter | list | tuple)):
        raise ParameterError(f"{', '.join(conventions)} declare a function's conventions: give "
                             "them to the adapter's constructor (e.g. adapters.apply_rotary(fn, "
                             "layout=...))")
    if isinstance(implementation, Backend):
        if names or unsupported:
            raise ParameterError("names/unsupported apply to a function, not a Backend "
                                 "(declare its scope with Backend.scope)")
        return implementation
    if isinstance(implementation, adapters.Adapter):
        implementation = [implementation]
    if isinstance(implementation, list | tuple) and implementation and all(
            isinstance(a, adapters.Adapter) for a in implementation):
        if names or unsupported:
            raise ParameterError("names/unsupported go to the adapter's constructor "
                                 "(e.g. adapters.rope_function(fn, names=...))")
        return adapters.as_backend(*implementation, name=name, framework=framework,
                                   dtypes=dtypes, compiled=compiled)
    if callable(implementation):
        if encoding is None:
            raise ParameterError("check(fn): say which encoding fn implements, e.g. "
                                 "check(my_rope, 'rope')")
        adapter = adapters.function(encoding, implementation, names, unsupported,
                                    framework=framework, **conventions)
        return adapters.as_backend(adapter, name=name, framework=framework, dtypes=dtypes,
                                   compiled=compiled)
    raise ParameterError(f"check: {implementation!r} is not a function, an adapter or a Backend")


def check(implementation: Callable[..., Any] | adapters.Adapter | Backend,
          encoding: str | None = None, *, names: Mapping[str, str] | None = None,
          unsupported: Mapping[str, Any] | None = None, framework: str | None = None,
          precision: str = "exact", dtypes: Iterable[str] | None = None,
          modes: Iterable[str] = ("eager",), device: str = "cpu", max_examples: int = 25,
          cases: bool = True, properties: bool = True, gradients: bool = True,
          expectations: Mapping[str, str] | None = None, skip: Iterable[str] = (),
          name: str | None = None, named: str | Iterable[str] | None = None,
          layout: str | None = None, axes: str | None = None,
          settings: Mapping[str, str] | None = None, dtype_hint: str = "dtypes=") -> CheckReport:
    """Check one implementation against the spec(s) it provides.

    ``implementation``: a function with its own signature (give ``encoding``; ``names`` maps
    posenc's parameter names to its own, ``unsupported`` declares values it does not cover;
    see :func:`posenc.backends.adapters.function`), an adapter from
    :mod:`posenc.backends.adapters` (``apply_rotary``, ``frequency_function``,
    ``cos_sin_cache``, ``alibi_tensor``, ...), a list of adapters, or a Backend.
    ``encoding``: the spec to run (default: every spec whose function it provides).
    ``layout``: the pairing a function is fixed at (``"interleaved"``: every case and property
    in the other pairing runs on it through the feature permutation, and says so), or a
    sinusoidal table's column layout (``"concat"``, ``"t2t"``: the others run through a column
    gather, docs/conventions.md); ``axes``:
    ``"bshd"`` for a function taking ``x`` as ``[batch, seq, heads, dim]``.
    ``modes``: ``eager`` (default) and/or ``compiled`` (the framework's compile hook around
    the function). ``named``: model name(s) from :mod:`posenc.dialects.named`: run only the
    golden cases holding those models' published configurations (conformance/named.py).
    ``precision``: the profile checks must meet (``exact``, ``conventional``, ``reduced``);
    every result is graded with the tightest one it meets either way. ``dtypes``: by default,
    those a function or adapter computes in, probed on its smallest golden cases as ``posenc
    check`` does (a dtype it raises on is left out; float64 where it computes in float32); a
    Backend's own. ``settings``: framework settings to run the code under
    (``{"matmul_precision": "highest"}``; by default the caller's, with JAX's 64-bit mode
    around float64 checks only). The report is a :class:`CheckReport`:
    ``print(report)`` shows coverage, grade, failures with their diagnoses and the summary.
    """
    modes = list(modes)
    if dtypes is not None:
        dtypes = tuple(dtypes)
        if unknown := [d for d in dtypes if d not in FLOAT_DTYPES]:
            raise ParameterError(f"dtypes: {unknown[0]!r} is not a dtype posenc checks in (known: "
                                 f"{', '.join(FLOAT_DTYPES)})")
    conventions = {k: v for k, v in (("layout", layout), ("axes", axes)) if v is not None}
    backend = _backend(implementation, encoding, names, unsupported, framework, dtypes, name,
                       compiled="compiled" in modes, conventions=conventions)
    if encoding is not None:
        encodings = [encoding]
    else:
        encodings = [s.id for s in specs().values() if s.function in backend.overrides]
        if not encodings:
            raise ParameterError(f"{backend.name} overrides no encoding function: give encoding=")
    if named:
        skip = [*skip, *named_checks.skips(named, specs(), encodings)]
    options = Options(
        backends=[backend], encodings=encodings, dtypes=[], modes=modes, device=device,
        max_examples=max_examples, cases=cases, properties=properties, gradients=gradients,
        expectations=dict(expectations or {}), skip=list(skip), precision=precision,
        settings=dict(settings or {}))
    choice = f"plan: dtypes {', '.join(backend.dtypes)} (asked)" if dtypes is not None else ""
    if dtypes is None and not isinstance(implementation, Backend):
        check_settings(options.settings)
        backend, choice = dtype_probe.choose(backend, encodings, device, settings, dtype_hint)
        options.backends = [backend]
    return CheckReport(backend.name, run(options), precision, choice)
