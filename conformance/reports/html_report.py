"""A self-contained HTML page of a (merged) conformance report.

One file, inline CSS, no scripts: the environment of each source run, an encoding × backend
overview, the encoding × backend × dtype × mode matrix with per-cell counts and colours,
the conflicts between sources, and every failure expandable (``<details>``) with its message.
Every piece of text from a report is escaped.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Mapping
from html import escape
from pathlib import Path
from typing import Any

from posenc.backends.backend import FLOAT_DTYPES

from .merge import combined_status

STATUSES = ("pass", "fail", "error", "conflict", "xfail", "xpass", "unjudgeable", "unsupported")
MODES = ("eager", "compiled")

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; font-weight: 600; }
.scroll { overflow-x: auto; }
td.cell { text-align: center; white-space: nowrap; font-variant-numeric: tabular-nums; }
.pass { background: #d7f2d7; } .fail { background: #f7c6c6; } .xfail { background: #fbeec2; }
.conflict { background: #e4d4f4; }
.unsupported { background: #e6e6e6; color: #666; } .empty { background: #fff; color: #bbb; }
.status { font-weight: 700; padding: 0 4px; border-radius: 3px; }
details { margin: 0.3em 0; border: 1px solid #ddd; border-radius: 4px; padding: 0.3em 0.6em; }
summary { cursor: pointer; } pre { white-space: pre-wrap; background: #f7f7f7; padding: 0.5em; }
code { font-size: 0.92em; } .muted { color: #666; }
"""


def render(report: Mapping[str, Any]) -> str:
    """The page of a merged report (:mod:`.merge`), as one HTML string."""
    results = report["results"]
    counts = Counter(combined_status(entries) for entries in results.values())
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        "<title>posenc conformance report</title>", f"<style>{CSS}</style></head><body>",
        "<h1>posenc conformance report</h1>",
        f'<p id="summary">{_summary_text(counts)} over {len(results)} checks from '
        f"{len(report['sources'])} run(s).</p>",
        _environment(report["sources"]),
        "<h2>Encoding × backend</h2>", _matrix(results, detailed=False),
        "<h2>Encoding × backend × dtype × mode</h2>", _matrix(results, detailed=True),
        _conflicts(report),
        _failures(report),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def write(report: Mapping[str, Any], path: Path) -> None:
    Path(path).write_text(render(report), encoding="utf-8")


def _summary_text(counts: Mapping[str, int]) -> str:
    shown = [f'<span class="status {_css(s)}">{counts[s]} {s}</span>' for s in STATUSES
             if counts.get(s)]
    return ", ".join(shown) or "no results"


def _environment(sources: list[Mapping[str, Any]]) -> str:
    rows: list[tuple[str, list[str]]] = []
    envs = [s.get("environment", {}) for s in sources]
    for key, label in (("python", "python"), ("platform", "platform"), ("machine", "machine"),
                       ("cpu", "cpu"), ("accelerators", "accelerators"),
                       ("devices", "devices checked")):
        rows.append((label, [_text(env.get(key, "")) for env in envs]))
    packages = sorted({name for env in envs for name in env.get("versions", {})})
    rows += [(name, [_text(env.get("versions", {}).get(name, "")) for env in envs])
             for name in packages]
    rows.append(("options", [_options(s.get("options", {})) for s in sources]))
    rows.append(("summary", [_text(", ".join(f"{v} {k}" for k, v in s.get("summary", {}).items()))
                             for s in sources]))
    head = "".join(f"<th>{escape(s['name'])}</th>" for s in sources)
    body = "".join(f"<tr><th>{escape(label)}</th>{''.join(f'<td>{c}</td>' for c in cells)}</tr>"
                   for label, cells in rows)
    return (f'<h2>Environment</h2><div class="scroll"><table id="environment"><tr><th></th>'
            f"{head}</tr>{body}</table></div>")


def _options(options: Mapping[str, Any]) -> str:
    shown = {k: v for k, v in options.items() if v not in (None, [], False, "")}
    return "<br>".join(f"<code>{escape(k)}={escape(json.dumps(v, default=str))}</code>"
                       for k, v in shown.items())


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "<br>".join(escape(str(v)) for v in value)
    return escape(str(value))


def _columns(results: Mapping[str, list[Mapping[str, Any]]], detailed: bool
             ) -> list[tuple[str, ...]]:
    seen = dict.fromkeys(_column(entries[0], detailed) for entries in results.values())

    def order(column: tuple[str, ...]) -> tuple[Any, ...]:
        if not detailed:
            return (list(seen).index(column),)
        first = next(c for c in seen if c[:2] == column[:2])
        dtype_rank = FLOAT_DTYPES.index(column[2]) if column[2] in FLOAT_DTYPES else 99
        mode_rank = MODES.index(column[3]) if column[3] in MODES else 99
        return (list(seen).index(first), dtype_rank, column[2], mode_rank, column[3])

    return sorted(seen, key=order)


def _column(entry: Mapping[str, Any], detailed: bool) -> tuple[str, ...]:
    base = (str(entry["backend"]), str(entry["device"]))
    return (*base, str(entry["dtype"]), str(entry["mode"])) if detailed else base


def _matrix(results: Mapping[str, list[Mapping[str, Any]]], detailed: bool) -> str:
    columns = _columns(results, detailed)
    encodings = sorted({str(entries[0]["encoding"]) for entries in results.values()})
    cells: dict[tuple[str, tuple[str, ...]], Counter[str]] = defaultdict(Counter)
    for entries in results.values():
        key = (str(entries[0]["encoding"]), _column(entries[0], detailed))
        cells[key][combined_status(entries)] += 1
    header = _matrix_header(columns, detailed)
    rows = []
    for encoding in encodings:
        tds = "".join(_cell(encoding, column, cells.get((encoding, column), Counter()))
                      for column in columns)
        rows.append(f"<tr><th>{escape(encoding)}</th>{tds}</tr>")
    name = "matrix-detail" if detailed else "matrix"
    return f'<div class="scroll"><table id="{name}">{header}{"".join(rows)}</table></div>'


def _matrix_header(columns: list[tuple[str, ...]], detailed: bool) -> str:
    if not detailed:
        heads = "".join(f"<th>{escape(b)}<br><span class='muted'>{escape(d)}</span></th>"
                        for b, d in columns)
        return f"<tr><th>encoding</th>{heads}</tr>"
    rows = []
    for level, label in ((2, "backend"), (3, "dtype"), (4, "mode")):
        cells, run = [], 1
        for i, column in enumerate(columns):
            nxt = columns[i + 1] if i + 1 < len(columns) else None
            if nxt is not None and nxt[:level] == column[:level]:
                run += 1
                continue
            text = "/".join(column[:2]) if level == 2 else column[level - 1]
            cells.append(f'<th colspan="{run}">{escape(text)}</th>')
            run = 1
        rows.append(f"<tr><th>{label}</th>{''.join(cells)}</tr>")
    return "".join(rows)


def _cell(encoding: str, column: tuple[str, ...], counts: Counter[str]) -> str:
    total = sum(counts.values())
    failed = counts["fail"] + counts["error"]
    ran = total - counts["unsupported"]
    if total == 0:
        css, text = "empty", "–"
    elif ran == 0:
        css, text = "unsupported", "n/a"
    elif failed:
        css, text = "fail", f"FAIL {failed}/{ran}"
        if counts["conflict"]:
            text += f" · conflict {counts['conflict']}"
    elif counts["conflict"]:
        css, text = "conflict", f"conflict {counts['conflict']}/{ran}"
    elif counts["xfail"]:
        css, text = "xfail", f"ok {ran - counts['xfail']} · xfail {counts['xfail']}"
    else:
        css, text = "pass", f"ok {ran}"
    keys = ("backend", "device", "dtype", "mode")
    attrs = [f'data-encoding="{escape(encoding)}"']
    attrs += [f'data-{k}="{escape(v)}"' for k, v in zip(keys, column, strict=False)]
    attrs += [f'data-{s}="{counts[s]}"' for s in STATUSES]
    title = ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s]) or "no checks"
    return f'<td class="cell {css}" {" ".join(attrs)} title="{escape(title)}">{escape(text)}</td>'


def _conflicts(report: Mapping[str, Any]) -> str:
    if not report["conflicts"]:
        return ""
    names = [s["name"] for s in report["sources"]]
    items = []
    for check_id in report["conflicts"]:
        lines = "".join(
            f"<li><b>{escape(names[e['source']])}</b>: <span class='status {_css(e['status'])}'>"
            f"{escape(str(e['status']))}</span> <pre>{escape(str(e.get('message') or ''))}</pre></li>"
            for e in report["results"][check_id])
        items.append(f'<details class="conflict" open><summary><code>{escape(check_id)}</code>'
                     f"</summary><ul>{lines}</ul></details>")
    return (f'<h2>Conflicts ({len(items)})</h2><p>Checks whose result differs between runs.</p>'
            f'<div id="conflicts">{"".join(items)}</div>')


def _failures(report: Mapping[str, Any]) -> str:
    names = [s["name"] for s in report["sources"]]
    failing = [(check_id, entry) for check_id, entries in report["results"].items()
               for entry in entries if entry["status"] in ("fail", "error")]
    if not failing:
        return '<h2>Failures</h2><p id="failures">None.</p>'
    items = []
    for check_id, entry in sorted(failing, key=lambda item: (item[0], item[1]["source"])):
        status = str(entry["status"])
        items.append(
            f'<details class="failure" data-id="{escape(check_id)}"><summary>'
            f'<span class="status fail">{escape(status.upper())}</span> '
            f"<code>{escape(check_id)}</code> <span class='muted'>"
            f"({escape(names[entry['source']])})</span></summary>"
            f"<pre>{escape(str(entry.get('message') or ''))}</pre>{_details(entry)}</details>")
    return f'<h2>Failures ({len(items)})</h2><div id="failures">{"".join(items)}</div>'


def _details(entry: Mapping[str, Any]) -> str:
    details = entry.get("details") or {}
    if not details:
        return ""
    rows = "".join(f"<tr><th>{escape(str(k))}</th><td><code>"
                   f"{escape(json.dumps(v, default=str))}</code></td></tr>"
                   for k, v in details.items())
    return f"<table>{rows}</table>"


def _css(status: str) -> str:
    return {"error": "fail", "xpass": "xfail"}.get(status, status)
