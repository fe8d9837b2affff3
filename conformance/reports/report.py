"""Reporting conformance results: encoding × backend matrix, JSON and JUnit files (the
progress bar is conformance/reports/progress.py)."""

from __future__ import annotations

import contextlib
import json
import platform
import sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..grading import UNJUDGEABLE
from ..runner import Result
from ..tolerances import element_summary

SKIPPED = ("unsupported", "xfail")
LIFTED = ("params", "inputs")  # result details that are keys of a JSON result entry


def summary(results: Iterable[Result]) -> Counter[str]:
    return Counter(r.status for r in results)


def closing_line(results: list[Result]) -> str:
    counts = summary(results)
    passed = counts["pass"] + counts["xpass"]
    failed = counts["fail"] + counts["error"]
    skipped = sum(counts[s] for s in SKIPPED)
    line = f"conformance: {passed} passed, {failed} failed, {skipped} skipped"
    if counts[UNJUDGEABLE]:  # neither a pass nor a failure: the profile cannot tell
        line += f", {counts[UNJUDGEABLE]} not judgeable"
    if counts["unsupported"]:  # coverage: the checks in the implementation's scope
        line += f"; in scope: {len(results) - counts['unsupported']} of {len(results)} checks"
    return line


def _cell(results: list[Result]) -> str:
    counts = summary(results)
    failed = counts["fail"] + counts["error"]
    ran = len(results) - counts["unsupported"]
    if not results:
        return "-"
    if ran == 0:
        return "unsupported"
    judged = ran - counts[UNJUDGEABLE]
    text = f"FAIL {failed}/{ran}" if failed else f"ok {judged}" if judged else "not judgeable"
    if failed:  # where: the dtype/mode combinations that failed
        where = sorted({f"{r.check.dtype}/{r.check.mode}" for r in results if r.failed})
        text += f" [{', '.join(where[:4])}{', …' if len(where) > 4 else ''}]"
    extras = [f"{counts[s]} {s}" for s in ("xfail", "xpass") if counts[s]]
    if counts[UNJUDGEABLE]:
        extras.append(f"{counts[UNJUDGEABLE]} not judgeable")
    looser = Counter(r.grade for r in results if r.status == "pass" and r.grade not in (None, "exact"))
    extras += [f"{n} graded {grade}" for grade, n in sorted(looser.items())]
    if counts["unsupported"]:
        extras.append(f"in scope {ran}/{len(results)}")
    return text + (f" ({', '.join(extras)})" if extras else "")


def matrix(results: list[Result]) -> str:
    """Encoding × backend table; each cell counts the checks over dtypes and modes."""
    backends = list(dict.fromkeys(r.check.backend for r in results))
    encodings = sorted({r.check.encoding for r in results})
    cells: dict[tuple[str, str], list[Result]] = defaultdict(list)
    for r in results:
        cells[(r.check.encoding, r.check.backend)].append(r)
    rows = [["encoding", *backends]]
    rows += [[e, *(_cell(cells[(e, b)]) for b in backends)] for e in encodings]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def settings(results: list[Result]) -> list[str]:
    """The framework settings the checks ran under, one line each (Backend.settings)."""
    return sorted({r.details["settings"] for r in results if r.details.get("settings")})


def failures(results: list[Result], limit: int | None = None) -> str:
    failed = [r for r in results if r.failed]
    lines = []
    for r in failed[:limit]:
        blind = r.details.get("not_judgeable_under")
        grade = (f" (meets the {r.grade} profile)" if r.grade else
                 f" (not judgeable under the {blind} profile)" if blind else "")
        lines.append(f"{r.status.upper()} {r.check.id}{grade}")
        lines += [f"    {line}" for line in r.message.splitlines()[:16]]
    if limit is not None and len(failed) > limit:
        lines.append(f"... and {len(failed) - limit} more (see --json)")
    lines += grades(results, limit)
    blind = [r for r in results if r.status == UNJUDGEABLE]
    for r in blind[:limit]:
        lines.append(f"NOT JUDGEABLE {r.check.id}")
        lines += [f"    {line}" for line in r.message.splitlines()[:4]]
    if limit is not None and len(blind) > limit:
        lines.append(f"... and {len(blind) - limit} more not judgeable under the profile asked")
    return "\n".join(lines)


def grades(results: list[Result], limit: int | None = None) -> list[str]:
    """A line per passing check that meets only a looser precision profile than exact."""
    looser = [r for r in results if r.status in ("pass", "xpass") and r.grade not in (None, "exact")]
    lines = [f"PASS {r.check.id} (grade: {r.grade}, not exact)"
             f"{element_summary(r.details.get('elements'))}" for r in looser[:limit]]
    if limit is not None and len(looser) > limit:
        lines.append(f"... and {len(looser) - limit} more passing a looser profile only")
    return lines


def environment() -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    versions = {}
    for dist in ("posenc", "numpy", "array-api-compat", "array-api-strict", "torch", "jax",
                 "jaxlib", "tensorflow", "tensorflow-cpu", "hypothesis"):
        try:
            versions[dist] = version(dist)
        except PackageNotFoundError:
            continue
    return {"python": platform.python_version(), "platform": platform.platform(),
            "machine": platform.machine(), "cpu": cpu_name(), "accelerators": accelerators(),
            "versions": versions}


def cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or platform.machine()


def accelerators() -> list[str]:
    """The accelerators seen by the frameworks this process has already imported (a report
    must not import a framework, or initialise one, just to describe the machine)."""
    found: list[str] = []
    torch = sys.modules.get("torch")
    # a broken driver must not lose the report: the probe is informative only
    with contextlib.suppress(Exception):
        if torch is not None and torch.cuda.is_available():
            found += [f"torch cuda:{i} {torch.cuda.get_device_name(i)}"
                      for i in range(torch.cuda.device_count())]
    jax = sys.modules.get("jax")
    with contextlib.suppress(Exception):
        if jax is not None:
            found += [f"jax {d.platform}:{d.id} {getattr(d, 'device_kind', '')}".strip()
                      for d in jax.devices() if d.platform != "cpu"]
    return found


def document(results: list[Result], options: dict[str, Any] | None = None) -> dict[str, Any]:
    """A run's report as JSON-ready data: environment, options, summary and every result."""
    return {
        "environment": {**environment(),
                        "devices": sorted({r.check.device for r in results})},
        "options": options or {},
        "summary": dict(summary(results)),
        "results": [
            {"id": r.check.id, "backend": r.check.backend, "device": r.check.device,
             "dtype": r.check.dtype, "mode": r.check.mode, "encoding": r.check.encoding,
             "kind": r.check.kind, "name": r.check.name, "status": r.status,
             "message": r.message, "seconds": round(r.seconds, 4), "grade": r.grade,
             "provided_by": r.provided_by, "diagnosis": r.details.get("diagnosis"),
             **{k: r.details.get(k) for k in LIFTED if k in r.details},
             "details": {k: v for k, v in r.details.items() if k not in LIFTED}}
            for r in results
        ],
    }


def to_json(results: list[Result], path: Path, options: dict[str, Any] | None = None) -> None:
    data = document(results, options)
    Path(path).write_text(json.dumps(data, indent=2, default=str) + "\n")


def to_html(results: list[Result], path: Path, options: dict[str, Any] | None = None) -> None:
    """A self-contained HTML page of this run (see :mod:`.html_report`)."""
    from . import html_report, merge

    html_report.write(merge.single(document(results, options), "this run"), Path(path))


def to_junit(results: list[Result], path: Path) -> None:
    root = ET.Element("testsuites", name="posenc conformance")
    by_backend: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        by_backend[r.check.backend].append(r)
    for backend, rs in by_backend.items():
        counts = summary(rs)
        suite = ET.SubElement(
            root, "testsuite", name=f"posenc.conformance.{backend}", tests=str(len(rs)),
            failures=str(counts["fail"]), errors=str(counts["error"]),
            skipped=str(sum(counts[s] for s in SKIPPED)),
            time=f"{sum(r.seconds for r in rs):.3f}")
        for r in rs:
            c = r.check
            case = ET.SubElement(
                suite, "testcase", classname=".".join((backend, c.device, c.dtype, c.mode,
                                                       c.encoding)),
                name=f"{c.kind}:{c.name}", time=f"{r.seconds:.4f}")
            if r.status in ("fail", "error"):
                tag = "failure" if r.status == "fail" else "error"
                node = ET.SubElement(case, tag, message=r.message.splitlines()[0][:500]
                                     if r.message else r.status)
                node.text = r.message
            elif r.status in SKIPPED:
                ET.SubElement(case, "skipped", message=f"{r.status}: {r.message}"[:500])
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
