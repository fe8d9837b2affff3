"""The HTML report page and `posenc report merge`: parsed back, the matrix is the results."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from posenc.cli import main
from posenc.conformance.reports import html_report, merge, report
from posenc.conformance.runner import Check, Result

SCRIPT = "<script>alert('x')</script>"


class Page(HTMLParser):
    """The parts of a report page a reader sees: matrix cells, failures, tags used."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.cells: list[dict[str, str]] = []
        self.failures: list[dict[str, str]] = []
        self.conflicts: list[str] = []
        self.tables: dict[str, str] = {}
        self._cell: dict[str, str] | None = None
        self._failure: dict[str, str] | None = None
        self._conflict: list[str] | None = None
        self._table: str | None = None
        self._text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        a = {k: v or "" for k, v in attrs}
        if tag == "table" and "id" in a:
            self._table, self._text = a["id"], []
        if tag == "td" and "cell" in a.get("class", "").split():
            self._cell = {**a, "table": self._table or "", "text": ""}
        if tag == "details" and "failure" in a.get("class", ""):
            self._failure = {"id": a["data-id"], "text": ""}
        if tag == "details" and "conflict" in a.get("class", ""):
            self._conflict = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            self.cells.append(self._cell)
            self._cell = None
        if tag == "details" and self._failure is not None:
            self.failures.append(self._failure)
            self._failure = None
        if tag == "details" and self._conflict is not None:
            self.conflicts.append("".join(self._conflict))
            self._conflict = None
        if tag == "table" and self._table is not None:
            self.tables[self._table] = "".join(self._text)
            self._table = None

    def handle_data(self, data: str) -> None:
        for sink in (self._cell, self._failure):
            if sink is not None:
                sink["text"] += data
        if self._conflict is not None:
            self._conflict.append(data)
        if self._table is not None:
            self._text.append(data)

    def cell(self, table: str, **where: str) -> dict[str, str]:
        found = [c for c in self.cells if c["table"] == table
                 and all(c.get(f"data-{k}") == v for k, v in where.items())]
        assert len(found) == 1, (table, where, len(found))
        return found[0]


def result(backend: str, dtype: str, mode: str, encoding: str, name: str, status: str,
           message: str = "", device: str = "cpu") -> Result:
    check = Check(backend, device, dtype, mode, encoding, "case", name)
    return Result(check, status, message, {"max_abs": 0.5} if status == "fail" else {})


def run_results() -> list[Result]:
    return [
        result("numpy", "float64", "eager", "rope", "a", "pass"),
        result("numpy", "float64", "eager", "rope", "b", "pass"),
        result("numpy", "float32", "eager", "rope", "a", "fail", f"max abs 0.5 {SCRIPT}"),
        result("numpy", "float32", "eager", "rope", "b", "pass"),
        result("numpy", "float64", "compiled", "rope", "a", "unsupported", "no compiled mode"),
        result("torch", "float32", "compiled", "rope", "a", "xfail", "known gap"),
        result("torch", "float32", "compiled", "rope", "b", "pass"),
        result("numpy", "float64", "eager", "t5_bias", "a", "error", "TypeError: boom"),
    ]


def test_run_page_shows_the_matrix_the_failures_and_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "report.html"
    report.to_html(run_results(), path, {"backend": ["numpy", "torch"], "max_examples": 5})
    text = path.read_text(encoding="utf-8")
    page = Page(text)
    assert not page.tags & {"script", "link", "img", "iframe"}  # self-contained, escaped
    assert "src=" not in text and "http" not in text

    overview = page.cell("matrix", encoding="rope", backend="numpy", device="cpu")
    assert (overview["data-pass"], overview["data-fail"], overview["data-unsupported"]) == \
        ("3", "1", "1")
    assert overview["text"] == "FAIL 1/4" and "fail" in overview["class"].split()
    torch = page.cell("matrix", encoding="rope", backend="torch")
    assert (torch["data-pass"], torch["data-xfail"], torch["text"]) == ("1", "1", "ok 1 · xfail 1")
    assert "xfail" in torch["class"].split()
    errored = page.cell("matrix", encoding="t5_bias", backend="numpy")
    assert (errored["data-error"], errored["text"]) == ("1", "FAIL 1/1")
    assert page.cell("matrix", encoding="t5_bias", backend="torch")["text"] == "–"

    detail = page.cell("matrix-detail", encoding="rope", backend="numpy", dtype="float32",
                       mode="eager")
    assert (detail["data-pass"], detail["data-fail"], detail["text"]) == ("1", "1", "FAIL 1/2")
    assert page.cell("matrix-detail", encoding="rope", backend="numpy", dtype="float64",
                     mode="eager")["text"] == "ok 2"
    assert page.cell("matrix-detail", encoding="rope", backend="numpy", dtype="float64",
                     mode="compiled")["text"] == "n/a"
    assert len([c for c in page.cells if c["table"] == "matrix-detail"]) == 2 * 4

    failures = {f["id"]: f["text"] for f in page.failures}
    assert set(failures) == {"numpy/cpu/float32/eager/rope/case:a",
                             "numpy/cpu/float64/eager/t5_bias/case:a"}
    assert SCRIPT in failures["numpy/cpu/float32/eager/rope/case:a"]  # as text, not markup
    assert "max_abs" in failures["numpy/cpu/float32/eager/rope/case:a"]
    assert "TypeError: boom" in failures["numpy/cpu/float64/eager/t5_bias/case:a"]

    environment = page.tables["environment"]
    import platform

    assert platform.python_version() in environment and "numpy" in environment
    assert 'max_examples=5' in environment and "devices checked" in environment


def document(results: list[Result], accelerators: list[str]) -> dict[str, Any]:
    doc = report.document(results, {"device": results[0].check.device})
    doc["environment"]["accelerators"] = accelerators
    return json.loads(json.dumps(doc, default=str))


def cpu_and_gpu_reports(tmp_path: Path) -> tuple[Path, Path]:
    cpu = [result("numpy", "float64", "eager", "rope", "a", "pass"),
           result("numpy", "float64", "eager", "rope", "b", "pass"),
           result("torch", "float32", "eager", "rope", "a", "pass")]
    gpu = [result("numpy", "float64", "eager", "rope", "a", "pass"),   # agrees
           result("numpy", "float64", "eager", "rope", "b", "fail", "differs on this machine"),
           result("torch", "float32", "eager", "rope", "a", "fail", "cuda mismatch",
                  device="cuda")]
    paths = tmp_path / "cpu.json", tmp_path / "gpu.json"
    paths[0].write_text(json.dumps(document(cpu, [])))
    paths[1].write_text(json.dumps(document(gpu, ["torch cuda:0 Some GPU"])))
    return paths


def test_merge_keeps_each_source_and_shows_conflicts(tmp_path: Path) -> None:
    cpu, gpu = cpu_and_gpu_reports(tmp_path)
    merged = merge.merge([merge.load(cpu), merge.load(gpu)])
    assert [s["name"] for s in merged["sources"]] == ["cpu.json", "gpu.json"]
    assert merged["sources"][1]["environment"]["accelerators"] == ["torch cuda:0 Some GPU"]
    results = merged["results"]
    assert len(results) == 4  # torch/cpu and torch/cuda are different checks
    assert [e["source"] for e in results["numpy/cpu/float64/eager/rope/case:a"]] == [0, 1]
    assert merged["conflicts"] == ["numpy/cpu/float64/eager/rope/case:b"]
    assert merged["summary"] == {"pass": 2, "conflict": 1, "fail": 1}
    again = merge.merge([merge.merge([merge.load(cpu)]), merge.load(gpu)])
    assert again["results"] == results  # merged reports merge again

    page = Page(html_report.render(merged))
    cell = page.cell("matrix", encoding="rope", backend="numpy", device="cpu")
    assert (cell["data-pass"], cell["data-conflict"], cell["text"]) == ("1", "1", "conflict 1/2")
    assert "conflict" in cell["class"].split()
    gpu_cell = page.cell("matrix", encoding="rope", backend="torch", device="cuda")
    assert (gpu_cell["data-fail"], gpu_cell["text"]) == ("1", "FAIL 1/1")
    assert page.cell("matrix", encoding="rope", backend="torch", device="cpu")["text"] == "ok 1"
    (conflict,) = page.conflicts
    assert "cpu.json" in conflict and "gpu.json" in conflict
    assert "differs on this machine" in conflict
    assert {f["id"] for f in page.failures} == {"numpy/cpu/float64/eager/rope/case:b",
                                               "torch/cuda/float32/eager/rope/case:a"}
    assert "Some GPU" in page.tables["environment"]


def test_cli_merge_writes_json_and_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cpu, gpu = cpu_and_gpu_reports(tmp_path)
    out, page = tmp_path / "merged.json", tmp_path / "merged.html"
    assert main(["report", "merge", str(cpu), str(gpu), "-o", str(out), "--html", str(page)]) == 0
    printed = capsys.readouterr().out
    assert "1 conflict(s)" in printed and "numpy/cpu/float64/eager/rope/case:b" in printed
    assert json.loads(out.read_text())["conflicts"] == ["numpy/cpu/float64/eager/rope/case:b"]
    assert len(Page(page.read_text()).failures) == 2

    assert main(["report", "merge", str(cpu)]) == 2
    assert "-o MERGED.json" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{not json")
    assert main(["report", "merge", str(tmp_path / "bad.json"), "-o", str(out)]) == 2
    assert "bad.json: cannot read a conformance report" in capsys.readouterr().err
    (tmp_path / "other.json").write_text('{"results": {}}')
    assert main(["report", "merge", str(tmp_path / "other.json"), "-o", str(out)]) == 2
    assert "not a conformance report" in capsys.readouterr().err


def test_conformance_html_of_a_real_run_matches_its_json(tmp_path: Path) -> None:
    page_path, json_path = tmp_path / "run.html", tmp_path / "run.json"
    code = main(["conformance", "--backend", "numpy", "--encoding", "alibi_slopes",
                 "--dtype", "float64", "--mode", "eager", "--mode", "compiled", "--only", "cases",
                 "-q", "--json", str(json_path), "--html", str(page_path)])
    assert code == 0
    results = json.loads(json_path.read_text())["results"]
    page = Page(page_path.read_text(encoding="utf-8"))
    for mode in ("eager", "compiled"):
        statuses = [r["status"] for r in results if r["mode"] == mode]
        cell = page.cell("matrix-detail", encoding="alibi_slopes", backend="numpy",
                         dtype="float64", mode=mode)
        assert int(cell["data-pass"]) == statuses.count("pass")
        assert int(cell["data-unsupported"]) == statuses.count("unsupported")
    assert page.cell("matrix-detail", encoding="alibi_slopes", mode="eager")["text"] == \
        f"ok {len([r for r in results if r['mode'] == 'eager'])}"
    assert page.failures == []
