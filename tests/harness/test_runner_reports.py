"""Runner statuses (unsupported, xfail, xpass) and the JSON / JUnit / pytest outputs."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from posenc.catalog import specs
from posenc.conformance import Options, run
from posenc.conformance.reports.report import closing_line, matrix

from ..conftest import TESTS, run_cli
from ..mutants import overrides

CLAMP_GAP = "silent_clamp/*/learned/property:learned_out_of_range"


def test_unsupported_capabilities_are_not_passes() -> None:
    pytest.importorskip("array_api_strict")
    results = run(Options(backends=["strict"], dtypes=["bfloat16"], encodings=["rope"]))
    assert results and {r.status for r in results} == {"unsupported"}
    results = run(Options(backends=["numpy"], modes=["compiled"], encodings=["rope"]))
    assert {r.status for r in results} == {"unsupported"}
    assert "unsupported" in matrix(results)
    results = run(Options(backends=["numpy"], device="cuda", encodings=["learned"]))
    assert {r.status for r in results} == {"unsupported"}


def test_expectations_turn_known_gaps_into_xfail() -> None:
    options = Options(backends=[overrides.SILENT_CLAMP], encodings=["learned"], modes=["eager"],
                      dtypes=["float64"], expectations={CLAMP_GAP: "clamps like JAX's gather"})
    statuses = {r.check.name: r.status for r in run(options)}
    assert statuses["learned_out_of_range"] == "xfail"
    assert all(s == "pass" for n, s in statuses.items() if n != "learned_out_of_range")


def test_backend_shipped_expectations_apply() -> None:
    import dataclasses

    documented = dataclasses.replace(overrides.SILENT_CLAMP,
                                     expectations={CLAMP_GAP: "clamps like JAX's gather"})
    results = run(Options(backends=[documented], encodings=["learned"], modes=["eager"],
                          dtypes=["float64"]))
    assert {r.status for r in results} == {"pass", "xfail"}
    xfail = next(r for r in results if r.status == "xfail")
    assert xfail.message.startswith("clamps like JAX's gather")


def test_expectation_on_a_passing_check_is_an_xpass() -> None:
    options = Options(backends=["numpy"], encodings=["learned"], modes=["eager"],
                      dtypes=["float64"], expectations={"numpy/*/case:bert_like": "a guess"})
    results = run(options)
    assert [r.status for r in results if r.check.name == "bert_like"] == ["xpass"]
    assert closing_line(results).endswith("0 failed, 0 skipped")


def test_cli_reports(tmp_path: Path) -> None:
    gaps = tmp_path / "gaps.yaml"
    gaps.write_text(f'"{CLAMP_GAP.replace("silent_clamp", "mutants.overrides:SILENT_CLAMP")}": '
                    "clamps like JAX\n")
    report, junit = tmp_path / "r.json", tmp_path / "r.xml"
    proc = run_cli("conformance", "--backend", "numpy", "--backend",
                   "mutants.overrides:SILENT_CLAMP", "--encoding", "learned", "--mode", "eager",
                   "--dtype", "float64", "--max-examples", "3", "--json", str(report), "--junit",
                   str(junit), env={"PYTHONPATH": str(TESTS)})
    # the Backend object keeps its own name, so the expectation pattern above does not match
    assert proc.returncode == 1
    assert "failing encodings: learned" in proc.stdout
    data = json.loads(report.read_text())
    checks = len(specs()["learned"].cases) + len(specs()["learned"].properties)
    assert data["summary"] == {"pass": 2 * checks - 1, "fail": 1}
    failed = [r for r in data["results"] if r["status"] == "fail"]
    assert failed[0]["id"] == ("silent_clamp/cpu/float64/eager/learned/"
                               "property:learned_out_of_range")
    assert "numpy" in data["environment"]["versions"]
    suites = ET.parse(junit).getroot().findall("testsuite")
    assert {s.get("name"): (s.get("tests"), s.get("failures")) for s in suites} == {
        "posenc.conformance.numpy": (str(checks), "0"),
        "posenc.conformance.silent_clamp": (str(checks), "1")}

    gaps.write_text(f'"{CLAMP_GAP}": clamps like JAX\n')
    proc = run_cli("conformance", "--backend", "mutants.overrides:SILENT_CLAMP", "--encoding",
                   "learned", "--mode", "eager", "--dtype", "float64", "--max-examples", "3",
                   "--expectations", str(gaps), "-q", env={"PYTHONPATH": str(TESTS)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 xfail" in proc.stdout


def test_cli_fails_when_nothing_could_be_checked() -> None:
    proc = run_cli("conformance", "--backend", "numpy", "--device", "cuda", "-q")
    assert proc.returncode == 1
    assert "nothing was checked" in proc.stderr
    # and why, with what the machine has instead
    assert "no device 'cuda' on this machine (backend 'numpy' has: cpu)" in proc.stderr
    assert "`posenc conformance --help` lists the choices" in proc.stderr


def test_cli_usage_errors_exit_2() -> None:
    proc = run_cli("conformance", "--backend", "posenc_no_such_backend")
    assert proc.returncode == 2 and "cannot import backend 'posenc_no_such_backend'" in proc.stderr
    proc = run_cli("conformance", "--encoding", "no_such_encoding")
    assert proc.returncode == 2 and "unknown encoding(s) ['no_such_encoding']" in proc.stderr


def test_pytest_plugin_runs_the_same_checks(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "posenc.conformance", "--posenc-backend",
         "numpy", "--posenc-encoding", "learned", "--posenc-max-examples", "3", "-q",
         "-p", "no:cacheprovider"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    # numpy: 3 dtypes x the eager checks; the compiled mode it lacks is one skip per dtype
    checks = len(specs()["learned"].cases) + len(specs()["learned"].properties)
    assert f"{3 * checks} passed, 3 skipped" in proc.stdout


def test_skip_deselects_checks_and_says_how_many() -> None:
    proc = run_cli("conformance", "--backend", "numpy", "--encoding", "learned", "--mode", "eager",
                   "--skip", "numpy/*/float16/*", "--skip", "*/property:*", "-q", "--exhaustive")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    spec = specs()["learned"]
    total = 3 * (len(spec.cases) + len(spec.properties))
    dropped = total - 2 * len(spec.cases)
    assert f"deselected: {dropped} of {total} checks (numpy/*/float16/*, */property:*)" \
        in proc.stderr
    assert f"conformance: {2 * len(spec.cases)} passed, 0 failed, 0 skipped" in proc.stdout


def test_compiled_cases_keeps_the_first_golden_cases_in_compiled_mode_only() -> None:
    pytest.importorskip("jax")
    from posenc.conformance.runner import plan

    spec = specs()["rope"]
    checks = plan(Options(backends=["jax"], encodings=["rope"], dtypes=["float32"],
                          compiled_cases=2))
    by_mode = {mode: [c for c in checks if c.mode == mode and c.kind == "case"]
               for mode in ("eager", "compiled")}
    assert [c.name for c in by_mode["compiled"]] == [c.name for c in spec.cases[:2]]
    assert len(by_mode["eager"]) == len(spec.cases)
    compiled_properties = [c for c in checks if c.mode == "compiled" and c.kind == "property"]
    assert len(compiled_properties) == len(spec.properties)


def test_the_progress_bar_has_one_home() -> None:
    """conformance.progress draws the bar the runner shows; report.py had a second, unused one."""
    from posenc.conformance.reports import progress, report

    assert hasattr(progress, "Progress") and not hasattr(report, "Progress")
