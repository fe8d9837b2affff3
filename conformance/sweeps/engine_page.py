"""``posenc sweep --from-reports DIR``: the transformers sweep's report and the engines'
(``sweep-<engine>.json``) merged into ``docs/engines.md``, one row per model family and one
column per engine, with each report kept beside the page (``docs/sweeps/``) as the evidence
its cells link to.

Freshness: the page records a hash of this module and of the reports it was made from; each
engine report records a hash of its sweep's code and the engine version
(:func:`.engine_report.code_hash`), which :func:`check` recomputes too.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from pathlib import Path
from typing import Any

from ..reports.scoreboard import HASH_LINE, recorded_hash
from .engine_report import REPORT
from .registry import report_problem

MARKDOWN = "engines.md"
EVIDENCE = "sweeps"  # the reports' folder beside the page
# column -> (report name, title)
ENGINES = {"transformers": "transformers", "vllm": "vLLM", "mlx-lm": "MLX-LM",
           "llama.cpp": "llama.cpp"}
KNOWN_ISSUES = "known-issues.md"
WIDTH = 110  # characters of a reason a cell keeps


def read_reports(directory: Path) -> dict[str, dict[str, Any]]:
    """engine -> its report, for the reports present in ``directory``."""
    out = {}
    for engine in ENGINES:
        path = directory / REPORT.format(engine)
        if path.exists():
            out[engine] = json.loads(path.read_text(encoding="utf-8"))
    return out


def trimmed(report: dict[str, Any]) -> dict[str, Any]:
    """A report as kept for evidence: the findings that failed, not every comparison."""
    families = [{**row, "findings": [f for f in row.get("findings", []) if f.get("grade") is None]}
                for row in report["families"]]
    return {**report, "families": families}


def _short(text: str, width: int = WIDTH) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"


def _anchor(adjudication: str) -> str:
    """The known-issues heading an adjudication names (``... (known-issues.md#anchor)``)."""
    if "#" in adjudication and KNOWN_ISSUES in adjudication:
        return adjudication.split(KNOWN_ISSUES, 1)[1].split(")", 1)[0]
    return ""


def cell(row: dict[str, Any] | None, engine: str) -> str:
    """One family's cell for one engine."""
    if row is None:
        return "not swept"
    verdict = row["verdict"]
    reason = row.get("reason", "")
    evidence = f"{EVIDENCE}/{REPORT.format(engine)}"
    if verdict == "conforms":
        via = ", through its Transformers backend" if "Transformers modeling backend" in reason \
            else ""
        return f"conforms ({row.get('profile') or '—'}{via})"
    if verdict == "diverges":
        adjudication = row.get("adjudication", "")
        link = f"[evidence]({evidence})"
        if _anchor(adjudication):
            link += f", [{adjudication.split(':')[0]}]({KNOWN_ISSUES}{_anchor(adjudication)})"
        elif adjudication:
            link += f"; {_short(adjudication.split(':')[0], 40)}"
        return f"**diverges**: {_short(reason)} ({link})"
    if verdict == "not supported":
        return "not supported"
    if verdict == "spec gap":
        return f"spec gap: {_short(reason)}"
    if verdict == "no rope":  # the model, run, rotated nothing (the transformers sweep)
        return "no rope"
    return f"not checkable: {_short(reason)}"


def inputs_hash(reports: dict[str, dict[str, Any]]) -> str:
    digest = hashlib.sha256()
    digest.update(Path(__file__).read_bytes().replace(b"\r\n", b"\n"))
    for engine in sorted(reports):
        digest.update(engine.encode())
        digest.update(json.dumps(reports[engine], sort_keys=True).encode())
    return digest.hexdigest()


def _header(reports: dict[str, dict[str, Any]]) -> list[str]:
    lines = []
    for engine, title in ENGINES.items():
        report = reports.get(engine)
        if report is None:
            lines.append(f"- **{title}**: not run in this build of the page (no "
                         f"`{REPORT.format(engine)}`); its column says `not run`.")
            continue
        versions = ", ".join(f"{k} {v}" for k, v in report["versions"].items())
        counts: dict[str, int] = {}
        for row in report["families"]:
            counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
        saved = [row.get("saved_config", "").split(":")[0] for row in report["families"]]
        tried = [s for s in saved if s]
        lines.append(f"- **{title}** ({versions}): {len(report['families'])} families in "
                     f"{report['seconds']:.0f} s: " + ", ".join(
                         f"{k} {n}" for k, n in sorted(counts.items())) + "." + (
                         f" Given the config.json transformers saves (rope_parameters only), "
                         f"{len(tried)} families: " + ", ".join(
                             f"{k} {tried.count(k)}" for k in sorted(set(tried))) + "."
                         if tried else ""))
    return lines


def markdown(reports: dict[str, dict[str, Any]]) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    model_types: dict[str, str] = {}
    for engine, report in reports.items():
        for row in report["families"]:
            rows.setdefault(row["family"], {})[engine] = row
            if row.get("model_type"):
                model_types.setdefault(row["family"], row["model_type"])
    lines = [
        "# Every engine, every model family", "",
        "Each model family of transformers (a model folder with a rotary embedding or an "
        "ALiBi / T5 bias), built from its config class with the sizes shrunk, and what each "
        "engine's own code computes for it, checked against posenc's float64 functions. "
        "Generated by `posenc sweep --from-reports DIR` from one run of the sweeps "
        "(`nox -s sweeps`); do not edit by hand. How each engine is checked: "
        "[`conformance/sweeps/`](../conformance/sweeps/); the transformers column is "
        "[families.md](families.md).", "",
        f"Page written {now}. The runs:", "", *_header(reports), "",
        "A cell says **conforms** (with the tightest precision profile every comparison "
        "meets: `exact`, `conventional` for float32 angles m·θ, `reduced`; \"through its "
        "Transformers backend\": vLLM runs transformers' modeling code, its own positions and "
        "config), **diverges** "
        "(the diagnosis and a link to the evidence: the report, and the known issue where the "
        "divergence is settled as an engine bug), **not supported** (the engine has no model "
        "code for the family, or, vLLM, its Transformers backend refuses it), **not "
        "checkable** (why), or **spec gap** (transformers only: a "
        "schedule posenc cannot state yet).", "",
        "| family | model_type | " + " | ".join(ENGINES.values()) + " |",
        "|---|---|" + "---|" * len(ENGINES)]
    for family in sorted(rows):
        cells = [cell(rows[family].get(e), e) if e in reports else "not run" for e in ENGINES]
        lines.append(f"| `{family}` | {model_types.get(family, '—')} | " + " | ".join(cells)
                     + " |")
    lines += ["", HASH_LINE.format(inputs_hash(reports)), ""]
    return "\n".join(lines)


def write(directory: Path, out: Path) -> Path:
    """Merge the reports in ``directory``; keep them (trimmed) in ``out/sweeps``."""
    reports = {engine: trimmed(r) for engine, r in read_reports(directory).items()}
    if not reports:
        raise FileNotFoundError(f"no sweep-<engine>.json report in {directory}")
    evidence = out / EVIDENCE
    evidence.mkdir(parents=True, exist_ok=True)
    for engine, report in reports.items():
        (evidence / REPORT.format(engine)).write_text(json.dumps(report, indent=1) + "\n",
                                                      encoding="utf-8")
    page = out / MARKDOWN
    page.write_text(markdown(reports), encoding="utf-8")
    return page


def check(out: Path) -> str | None:
    """Why ``out/engines.md`` is stale (None: made by this code from the reports beside it,
    each made by the sweep code here)."""
    page = out / MARKDOWN
    if not page.exists():
        return f"{page} is missing"
    reports = read_reports(out / EVIDENCE)
    if recorded_hash(page.read_text(encoding="utf-8")) != inputs_hash(reports):
        return f"{page} was made by other code or from other reports (run `nox -s sweeps`)"
    for engine, report in reports.items():
        problem = report_problem(engine, report)
        if problem:
            return problem
    return None
