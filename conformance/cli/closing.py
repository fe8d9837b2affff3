"""The end of a ``posenc conformance`` run: the matrix, failures and findings printed, the
reports asked for written, and the exit status."""

from __future__ import annotations

import collections
import sys
from typing import Any

from .job import Outcome
from .settings import Settings


def conclude(settings: Settings, outcome: Outcome) -> int:
    """Print and write what the run found. The exit status: 0 green, 1 failures, 128 + signal
    stopped."""
    from .. import findings, golden_gate
    from ..reports import report

    results = outcome.results
    print(report.matrix(results))
    for line in report.settings(results):
        print(f"settings: {line}")
    text = report.failures(results, limit=None if settings.verbose else 30)
    if text:
        print("\n" + text)
    if golden_text := golden_gate.summary(results):  # each golden problem once
        print("\n" + golden_text)
    if grouped := findings.text(results):
        print("\n" + grouped)
    if settings.json and outcome.stopped is None:  # a stopped run's partial report is written
        report.to_json(results, settings.json, outcome.report_options)
    if settings.junit:
        report.to_junit(results, settings.junit)
    if settings.html:
        report.to_html(results, settings.html, dict(settings.given))
    failed = sorted({r.check.encoding for r in results if r.failed})
    if failed:
        print(f"\nfailing encodings: {', '.join(failed)}")
    print(report.closing_line(results))
    if outcome.stopped is not None:
        return 128 + outcome.stopped
    if settings.shard and not results:  # more shards than groups: an empty shard is no failure
        return 0
    if all(r.status == "unsupported" for r in results):
        print("nothing was checked: every selected backend/dtype/mode/device is unsupported here"
              f" ({_why_nothing(results)}); `posenc conformance --help` lists the choices",
              file=sys.stderr)
        return 1
    return 1 if failed else 0


def _why_nothing(results: list[Any]) -> str:
    """The commonest reasons the checks were unsupported, with their counts."""
    reasons = collections.Counter(r.message for r in results).most_common(3)
    return "; ".join(f"{reason}: {count} checks" for reason, count in reasons)
