"""Shards, worker processes, progress and partial reports of `posenc conformance`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from posenc.cli import main
from posenc.conformance import Options, Runner, shard
from posenc.conformance.reports import merge
from posenc.conformance.reports.progress import Progress, describe_plan
from posenc.conformance.runner import Check, Result
from posenc.errors import ParameterError

from ..conftest import TESTS

SMALL = ["--encoding", "rope", "--encoding", "alibi_bias", "--encoding", "learned",
         "--mode", "eager", "--dtype", "float64", "--only", "cases", "-q"]


def _plan(**kwargs: object) -> list[Check]:
    options = Options(backends=["numpy", "strict"], encodings=["rope", "learned", "alibi_bias",
                                                                "sinusoidal"], **kwargs)
    with Runner(options) as runner:
        return runner.plan()


def _statuses(path: Path) -> dict[str, str]:
    return {r["id"]: r["status"] for r in json.loads(path.read_text())["results"]}


def _without_timings(path: Path) -> list[dict[str, object]]:
    return [{k: v for k, v in r.items() if k != "seconds"}
            for r in json.loads(path.read_text())["results"]]


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_shards_partition_the_plan_into_balanced_whole_groups(n: int) -> None:
    pytest.importorskip("array_api_strict")
    checks = _plan()
    parts = [shard.select(checks, k, n) for k in range(1, n + 1)]
    # disjoint, and together the plan (each shard keeps plan order)
    assert Counter(c for part in parts for c in part) == Counter(checks)
    assert sum(len(p) for p in parts) == len(checks)
    for part in parts:
        assert part == [c for c in checks if c in set(part)]
    # a group (backend/device/dtype/mode/encoding) never spans two shards
    home = {}
    for k, part in enumerate(parts):
        for c in part:
            assert home.setdefault(shard.group_key(c), k) == k
    # balanced: no shard exceeds the lightest one by more than the costliest group
    loads = [sum(shard.check_cost(c) for c in part) for part in parts]
    biggest = max(sum(shard.check_cost(checks[i]) for i in g) for g in shard.groups(checks))
    assert max(loads) - min(loads) <= biggest + 1e-9
    # deterministic
    assert [shard.select(checks, k, n) for k in range(1, n + 1)] == parts


def test_compiled_checks_weigh_more_than_eager_ones() -> None:
    eager = Check("torch", "cpu", "float32", "eager", "rope", "case", "x")
    compiled = Check("torch", "cpu", "float32", "compiled", "rope", "case", "x")
    prop = Check("torch", "cpu", "float32", "compiled", "rope", "property", "p", 0)
    assert shard.check_cost(prop) > shard.check_cost(compiled) > 10 * shard.check_cost(eager)
    assert shard.family("torch-layers") == shard.family("torch") != shard.family("tensorflow")
    assert shard.family("keras-layers") == "tensorflow"


@pytest.mark.parametrize("text", ["3/2", "0/2", "x", "1/0", "", "1/2/3", "-1/2", "1.5/2"])
def test_bad_shard_specs_are_errors_naming_the_value(text: str) -> None:
    with pytest.raises(ParameterError) as info:
        shard.parse_shard(text)
    assert repr(text) in str(info.value)


@pytest.mark.parametrize(("flag", "value"), [("--shard", "3/2"), ("--shard", "0/2"),
                                             ("--shard", "x"), ("--workers", "0"),
                                             ("--workers", "two"), ("--workers", "-1")])
def test_bad_shard_and_worker_options_stop_the_cli(
        flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A usage error while parsing (exit 2), naming the option and the value."""
    with pytest.raises(SystemExit) as info:
        main(["conformance", "--backend", "numpy", "--encoding", "learned", flag, value])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert f"argument {flag}: " in err and value in err


def test_merged_shard_reports_equal_the_unsharded_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("array_api_strict")
    args = ["conformance", "--backend", "numpy", "--backend", "strict", *SMALL, "--workers", "1"]
    whole = tmp_path / "whole.json"
    assert main([*args, "--json", str(whole)]) == 0
    whole_matrix = capsys.readouterr().out.split("\nconformance:")[0]
    parts = [tmp_path / f"shard{k}.json" for k in (1, 2, 3)]
    for k, path in enumerate(parts, 1):
        assert main([*args, "--shard", f"{k}/3", "--json", str(path)]) == 0
    sizes = [len(_statuses(p)) for p in parts]
    assert all(sizes) and sum(sizes) == len(_statuses(whole))
    merged_path = tmp_path / "merged.json"
    capsys.readouterr()
    # in reverse: the columns still follow the plan's backend order
    assert main(["report", "merge", *map(str, parts[::-1]), "-o", str(merged_path)]) == 0
    assert capsys.readouterr().out.split("\nmerged ")[0] == whole_matrix
    merged = json.loads(merged_path.read_text())
    assert merged["conflicts"] == []
    assert {i: merge.combined_status(e) for i, e in merged["results"].items()} == \
        _statuses(whole)
    assert merged["summary"] == json.loads(whole.read_text())["summary"]


def test_an_empty_shard_succeeds_and_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["conformance", "--backend", "numpy", "--encoding", "learned", "--mode", "eager",
                 "--dtype", "float64", "--shard", "2/2", "-q"])
    assert code == 0
    assert "shard 2/2 is empty: the plan has only 1 group(s)" in capsys.readouterr().err


def test_two_workers_give_the_serial_results_and_exit_code(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("array_api_strict")
    args = ["conformance", "--backend", "numpy", "--backend", "strict", "--backend",
            "tests.mutants.overrides:SILENT_CLAMP", "--encoding", "learned", "--encoding",
            "rope", "--mode", "eager", "--dtype", "float64", "--max-examples", "3", "-q"]
    serial, parallel = tmp_path / "serial.json", tmp_path / "parallel.json"
    code_serial = main([*args, "--workers", "1", "--json", str(serial)])
    out_serial = capsys.readouterr().out
    code_parallel = main([*args, "--workers", "2", "--json", str(parallel)])
    out_parallel = capsys.readouterr().out
    assert code_serial == code_parallel == 1  # the clamping mutant fails one property
    assert _without_timings(parallel) == _without_timings(serial)
    assert "fail" in _statuses(serial).values()
    assert out_parallel == out_serial


@pytest.mark.slow
def test_a_crashing_worker_reports_its_checks_as_errors(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    code = main(["conformance", "--backend", "numpy", "--backend",
                 "tests.crashing_backends:CRASHING", "--encoding", "sinusoidal", "--encoding",
                 "learned", "--mode", "eager", "--dtype", "float64", "--only", "cases",
                 "--workers", "2", "-q", "--json", str(report)])
    assert code == 1
    results = json.loads(report.read_text())["results"]
    by_status = Counter((r["backend"], r["encoding"], r["status"]) for r in results)
    cases = {e: len(s.cases) for e, s in Runner(Options(backends=["numpy"])).specs.items()}
    # nothing lost: every planned check has a result; only the crashing ones are errors
    assert by_status == {("numpy", "sinusoidal", "pass"): cases["sinusoidal"],
                         ("numpy", "learned", "pass"): cases["learned"],
                         ("crashing", "learned", "pass"): cases["learned"],
                         ("crashing", "sinusoidal", "error"): cases["sinusoidal"]}
    errors = [r["message"] for r in results if r["status"] == "error"]
    assert "exited with code 3 while running this check" in errors[0]
    assert all("exited with code 3" in m for m in errors)


@pytest.mark.slow
def test_a_silent_worker_times_out_as_an_error(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    start = time.monotonic()
    code = main(["conformance", "--backend", "tests.crashing_backends:SLOW", "--backend",
                 "numpy", "--encoding", "sinusoidal", "--mode", "eager", "--dtype", "float64",
                 "--only", "cases", "--workers", "2", "--check-timeout", "3", "-q",
                 "--json", str(report)])
    assert time.monotonic() - start < 60
    assert code == 1
    statuses = Counter((r["backend"], r["status"]) for r in json.loads(report.read_text())
                       ["results"])
    assert set(statuses) == {("slow", "error"), ("numpy", "pass")}
    message = next(r["message"] for r in json.loads(report.read_text())["results"]
                   if r["status"] == "error")
    assert "timed out: no result for 3 s" in message


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_stopped_run_leaves_its_finished_results(tmp_path: Path, workers: str) -> None:
    marker, report = tmp_path / "marker", tmp_path / "r.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "posenc", "conformance", "--backend", "numpy", "--backend",
         "crashing_backends:SLOW", "--encoding", "learned", "--encoding", "sinusoidal",
         "--mode", "eager", "--dtype", "float64", "--only", "cases", "--workers", workers,
         "--json", str(report)],
        cwd=TESTS, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(TESTS), "POSENC_TEST_MARKER": str(marker)},
        start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert marker.exists(), proc.communicate()
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGTERM)  # as a CI runner stops a job: the whole group
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    assert "interrupted by SIGTERM" in err
    data = json.loads(report.read_text())
    assert data["complete"] is False and "SIGTERM" in data["interrupted"]
    assert data["planned"] > len(data["results"]) > 0
    assert {r["status"] for r in data["results"]} == {"pass"}  # the sleeping check is not in it
    assert f"conformance: {len(data['results'])} passed, 0 failed" in out
    assert "encoding" in out and "learned" in out  # the matrix so far
    assert not [r for r in data["results"] if r["id"].startswith("slow/cpu/float64/eager/sinus")]
    if workers == "1":  # plan order: every numpy check ran before the sleeping backend
        specs = Runner(Options(backends=["numpy"])).specs
        numpy = [r for r in data["results"] if r["backend"] == "numpy"]
        assert len(numpy) == len(specs["learned"].cases) + len(specs["sinusoidal"].cases)


def test_progress_prints_a_line_when_due_with_an_eta(tmp_path: Path) -> None:
    checks = _plan(modes=["eager"], dtypes=["float64"])[:20]
    text = describe_plan(checks, workers=2)
    assert text.startswith(f"plan: {len(checks)} checks: numpy {len(checks)} (eager {len(checks)})")
    assert "estimate: about" in text
    with (tmp_path / "log").open("w") as stream:
        progress = Progress(checks, stream=stream, interval=0.0)
        progress.start -= 10  # as if ten seconds had passed
        progress.finished(Result(checks[0], "pass"))
        progress.finished(Result(checks[1], "fail", "wrong"))
        progress.started(checks[2])
        progress.tick()
    lines = (tmp_path / "log").read_text().splitlines()
    assert lines[-1].startswith("[") and "2/20" in lines[-1] and "1 failed" in lines[-1]
    assert "ETA ?" not in lines[-1] and "ETA" in lines[-1]
    assert lines[-1].endswith(f"running {checks[2].id}")


@pytest.mark.slow
def test_pytest_plugin_runs_under_xdist_and_takes_a_shard() -> None:
    pytest.importorskip("xdist")
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--pyargs",
            "posenc.conformance", "--posenc-backend", "numpy", "--posenc-encoding", "learned",
            "--posenc-encoding", "alibi_slopes", "--posenc-dtype", "float64", "--posenc-mode", "eager", "-q"]
    part = subprocess.run([*args, "-n", "2", "--dist", "loadgroup", "--posenc-shard", "1/2"],
                          capture_output=True, text=True, cwd=TESTS, timeout=300)
    assert part.returncode == 0, part.stdout + part.stderr
    with Runner(Options(backends=["numpy"], encodings=["learned", "alibi_slopes"],
                        dtypes=["float64"],
                        modes=["eager"])) as runner:
        checks = runner.plan()
    assert 0 < len(shard.select(checks, 1, 2)) < len(checks)
    assert f"{len(shard.select(checks, 1, 2))} passed" in part.stdout
    bad = subprocess.run([*args, "--posenc-shard", "3/2"], capture_output=True, text=True,
                         cwd=TESTS, timeout=300)
    assert bad.returncode != 0 and "--posenc-shard '3/2'" in bad.stderr
