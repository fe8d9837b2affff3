"""Combining conformance reports from several machines (a CPU run and a GPU run) into one.

A merged report keeps every run as a *source* (its environment, options and summary) and
every result keyed by check id, each result naming the source it came from. When two
sources report different statuses for one check id, the check is a *conflict*: both results
stay, and the conflict is listed, never resolved silently. Merged reports merge again.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from posenc.errors import PosencError

FORMAT = "posenc-merged-report"
RESULT_FIELDS = ("backend", "device", "dtype", "mode", "encoding", "kind", "name", "status",
                 "message", "details", "seconds", "grade", "provided_by", "params", "inputs")


def load(path: Path) -> dict[str, Any]:
    """A report written by ``posenc conformance --json`` or ``posenc report merge``, as a
    merged report (a plain report becomes one source named after its file)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise PosencError(f"{path}: cannot read a conformance report: {exc}") from exc
    if isinstance(data, dict) and data.get("format") == FORMAT:
        return data
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise PosencError(f"{path}: not a conformance report (expected the JSON of "
                          "`posenc conformance --json` or `posenc report merge`)")
    return single(data, path.name)


def single(document: Mapping[str, Any], name: str) -> dict[str, Any]:
    """One run's report (``report.document``/``--json``) as a merged report of one source."""
    results: dict[str, list[dict[str, Any]]] = {}
    for i, item in enumerate(document["results"]):
        if not isinstance(item, dict) or "id" not in item or "status" not in item:
            raise PosencError(f"{name}: results[{i}] is not a check result (no id or status)")
        entry = {key: item.get(key) for key in RESULT_FIELDS}
        entry["source"] = 0
        results.setdefault(item["id"], []).append(entry)
    source = {"name": name, "environment": document.get("environment", {}),
              "options": document.get("options", {}), "summary": document.get("summary", {})}
    return _finish([source], results)


def merge(reports: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Merged reports (or :func:`single` ones) combined: sources appended, results grouped by
    check id, conflicts recomputed."""
    sources: list[dict[str, Any]] = []
    results: dict[str, list[dict[str, Any]]] = {}
    for report in reports:
        offset = len(sources)
        sources += [dict(s) for s in report["sources"]]
        for check_id, entries in report["results"].items():
            results.setdefault(check_id, []).extend(
                {**entry, "source": entry["source"] + offset} for entry in entries)
    return _finish(sources, results)


def check_shards(report: Mapping[str, Any], expected: int) -> None:
    """Raise unless the report's sources are exactly shards 1..``expected`` of one plan: a
    shard whose report went missing would otherwise leave its checks out of a green merge."""
    if expected < 1:
        raise PosencError(f"--expect-shards {expected}: must be at least 1")
    seen: dict[int, list[str]] = {}
    plans: set[tuple[int, Any]] = set()
    for source in report["sources"]:
        info = (source.get("options") or {}).get("shard")
        if not info:
            raise PosencError(f"report {source['name']!r} is not a shard (it was not run with "
                              f"--shard K/{expected})")
        seen.setdefault(int(info["index"]), []).append(source["name"])
        plans.add((int(info["of"]), info.get("plan_checks")))
    if len(plans) > 1:
        shown = ", ".join(f"{of} shards of {n} checks" for of, n in sorted(plans, key=str))
        raise PosencError(f"the shards come from different plans ({shown}): run every shard "
                          "with the same options and backends")
    (of, _), = plans
    if of != expected:
        raise PosencError(f"--expect-shards {expected}: the reports are shards of {of}")
    missing = [k for k in range(1, expected + 1) if k not in seen]
    twice = {k: names for k, names in seen.items() if len(names) > 1}
    if missing or twice:
        parts = ([f"missing shard(s) {', '.join(map(str, missing))}"] if missing else []) + [
            f"shard {k} given twice ({', '.join(names)})" for k, names in sorted(twice.items())]
        raise PosencError(f"--expect-shards {expected}: {'; '.join(parts)}")


def combined_status(entries: list[Mapping[str, Any]]) -> str:
    """The status of one check id across sources: theirs when they agree, else 'conflict'."""
    statuses = {entry["status"] for entry in entries}
    return statuses.pop() if len(statuses) == 1 else "conflict"


def write(report: Mapping[str, Any], path: Path) -> None:
    Path(path).write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")


def _finish(sources: list[dict[str, Any]], results: dict[str, list[dict[str, Any]]]
            ) -> dict[str, Any]:
    results = _in_plan_order(sources, results)
    conflicts = sorted(check_id for check_id, entries in results.items()
                       if combined_status(entries) == "conflict")
    summary = Counter(combined_status(entries) for entries in results.values())
    return {"format": FORMAT, "sources": sources, "summary": dict(summary),
            "conflicts": conflicts, "results": results}


def _in_plan_order(sources: list[dict[str, Any]], results: dict[str, list[dict[str, Any]]]
                   ) -> dict[str, list[dict[str, Any]]]:
    """Results grouped by backend in the order of the runs' plans (shards of one plan each
    hold part of it), so merged shards give the columns of the unsharded run."""
    order: list[str] = []
    for source in sources:
        order += [b for b in (source.get("options") or {}).get("plan_backends") or []
                  if b not in order]
    order += [e[0]["backend"] for e in results.values() if e[0]["backend"] not in order]
    rank = {b: i for i, b in enumerate(order)}
    return dict(sorted(results.items(), key=lambda item: rank[item[1][0]["backend"]]))


def as_results(report: Mapping[str, Any]) -> list[Any]:
    """A merged report's checks as runner results (a conflict counts as a failure), for the
    text matrix of :mod:`.report`."""
    from ..runner import Check, Result

    out = []
    for entries in report["results"].values():
        e = entries[0]
        check = Check(e["backend"], e["device"], e["dtype"], e["mode"], e["encoding"],
                      e["kind"], e["name"])
        status = combined_status(entries)
        out.append(Result(check, "fail" if status == "conflict" else status,
                          e.get("message") or "", seconds=float(e.get("seconds") or 0.0)))
    return out
