"""Failures grouped by encoding and diagnosis: 97 failures of one layout bug are one finding."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .runner import Result


@dataclass
class Finding:
    encoding: str
    diagnosis: dict[str, Any] | None  # the details["diagnosis"] record, None: not diagnosed
    results: list[Result] = field(default_factory=list)

    def line(self) -> str:
        n = len(self.results)
        kinds = {r.check.kind for r in self.results}
        what = f"{n} failing {kinds.pop() if len(kinds) == 1 else 'check'}{'s' if n > 1 else ''}"
        dtypes = sorted({r.check.dtype for r in self.results})
        where = f" in {', '.join(dtypes)}"
        if self.diagnosis is None:
            return f"{self.encoding}: {what}{where}, no known bug matched"
        d = self.diagnosis
        title = d.get("title", d["name"])
        return f"{self.encoding}: {title} ({d['name']}) — {what}{where}: {d['explanation']}"


def group(results: Iterable[Result]) -> list[Finding]:
    """One finding per (encoding, diagnosis) among the failures, largest first."""
    found: dict[tuple[str, str | None], Finding] = {}
    for r in results:
        if not r.failed:
            continue
        diagnosis = r.details.get("diagnosis")
        key = (r.check.encoding, diagnosis["name"] if diagnosis else None)
        found.setdefault(key, Finding(r.check.encoding, diagnosis)).results.append(r)
    return sorted(found.values(), key=lambda f: (f.encoding, f.diagnosis is None,
                                                 -len(f.results)))


def text(results: Iterable[Result]) -> str:
    """The findings block of the summary; empty when no failure was diagnosed."""
    findings = group(results)
    if not any(f.diagnosis for f in findings):
        return ""
    lines = ["findings (failures by encoding and likely bug):"]
    for f in findings:
        lines.append(f"  {f.line()}")
        lines.append(f"      e.g. {f.results[0].check.id}")
    return "\n".join(lines)
