"""``posenc bench`` runs end to end and reports every row: a smoke test, never a timed test."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from posenc import bench

from ..conftest import run_cli, run_python

# the rows the issue asks for (the quick sizes: S = 64, decode offsets 4096 and 2^20)
REQUIRED = [
    *(f"rope/64/torch/{r}" for r in ("transformers", "rotary-embedding-torch", "posenc-rope",
                                     "posenc-module", "posenc-inplace", "posenc-out")),
    *(f"rope/64/xla/{r}" for r in ("jnp-rotary", "posenc-jax", "keras-hub-jax", "keras-hub-tf",
                                   "posenc-tf")),
    *(f"decode/{o}/{r}" for o in (4096, 1048576)
      for r in ("transformers", "posenc-rope", "posenc-module", "jnp-rotary", "posenc-jax")),
    "sinusoidal/64x32/by-hand", "sinusoidal/64x32/posenc", "sinusoidal/64x32/transformers-distilbert",
    "t5/32/transformers", "t5/32/posenc",
    "alibi/4x32/transformers-bloom", "alibi/4x32/posenc-key-only", "alibi/4x32/posenc-causal",
]


def _check_rows(report: dict) -> dict[str, dict]:
    rows = {row["id"]: row for row in report["rows"]}
    listed = [row_id for case in report["cases"] for row_id in case["rows"]]
    assert sorted(listed) == sorted(rows)
    for row in rows.values():
        if row["status"] == "ok":
            assert row["median_s"] > 0, row
        else:
            assert row["status"] == "not installed", row
            assert row["detail"], row
    return rows


@pytest.mark.slow
def test_quick_bench_reports_every_row(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "bench.json"
    proc = run_cli("bench", "--quick", "--suite", "all", "--json", str(out), timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    rows = _check_rows(report)
    missing = [row_id for row_id in REQUIRED if row_id not in rows]
    assert not missing, missing
    assert report["meta"]["quick"] is True
    assert "rotary S=64" in proc.stdout and "issue targets" in proc.stdout
    for target in report["targets"]:  # reported, never asserted against
        assert target["ratio"] is None or target["ratio"] > 0


def test_missing_peer_is_a_row_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    args = argparse.Namespace(suite=["bias"], quick=True, threads=None, json=None, device="cpu")
    lines: list[str] = []
    report = bench.run(args, echo=lines.append)
    rows = _check_rows(report)
    assert rows["t5/32/transformers"]["status"] == "not installed"
    assert "transformers" in rows["t5/32/transformers"]["detail"]
    assert rows["t5/32/posenc"]["status"] == "ok"  # falls back to a random table
    assert rows["t5/32/posenc"]["ratio"] is None
    assert rows["alibi/4x32/posenc-causal"]["status"] == "ok"
    assert "not installed" in "\n".join(lines)


def test_importing_the_bench_and_planning_every_suite_imports_no_framework() -> None:
    # the CLI builds its parser and the workers their plan before any row runs
    code = ("import sys, posenc.bench\n"
            "from posenc.bench.plan import SUITES, plan\n"
            "from posenc.bench.sizes import FULL\n"
            "assert plan(FULL, SUITES)\n"
            "print(sorted(m for m in ('torch', 'jax', 'tensorflow', 'keras', 'transformers', "
            "'triton') if m in sys.modules))")
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_every_planned_row_is_unique_and_compares_within_its_case() -> None:
    from posenc.bench.plan import SUITES, plan
    from posenc.bench.sizes import FULL, QUICK
    from posenc.bench.workers import RUNNERS

    for sizes in (FULL, QUICK):
        cases = plan(sizes, SUITES)
        assert {case.suite for case in cases} == set(SUITES)
        ids = [planned.id for case in cases for planned in case.planned]
        assert len(ids) == len(set(ids))
        for case in cases:
            own = {planned.id for planned in case.planned}
            for planned in case.planned:
                assert planned.vs is None or planned.vs in own, planned.id
                assert planned.runner in RUNNERS, planned.id
