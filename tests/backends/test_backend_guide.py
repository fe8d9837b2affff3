"""docs/backends.md stays true: its backend and its expectations file run as the guide says."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from ..conftest import ROOT

GUIDE = (ROOT / "docs" / "backends.md").read_text()


def _block(marker: str, language: str) -> str:
    blocks = [b for b in re.findall(rf"```{language}\n(.*?)```", GUIDE, re.S) if marker in b]
    assert len(blocks) == 1, marker
    return blocks[0]


def _posenc(*args: str, cwd) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-P", "-m", "posenc", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=600)


@pytest.mark.slow
def test_the_guides_backend_runs_as_shown(tmp_path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "my_backend.py").write_text(_block("# my_backend.py", "python"))
    (tmp_path / "gaps.yaml").write_text(_block("# gaps.yaml", "yaml"))
    command = _block("posenc conformance --backend ./my_backend.py", "bash").split()
    assert command[:2] == ["posenc", "conformance"]
    proc = _posenc(*command[1:], "--dtype", "float32", "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(grade: conventional, not exact)" in proc.stdout
    assert "in scope: 14 of 57 checks" in proc.stdout
    # exact: float32 angles fail, each marked as meeting the conventional profile; the
    # expectations file marks the float16 base-5e5 case by its parameter value
    proc = _posenc("conformance", "--backend", "./my_backend.py:BACKEND", "--encoding", "rope",
                   "--mode", "eager", "--dtype", "float32", "--only", "cases", "-q",
                   "--expectations", "gaps.yaml", cwd=tmp_path)
    assert proc.returncode == 1
    assert "FAIL my-rope/cpu/float32/eager/rope/case:llama_head_dim_128 (meets the " \
           "conventional profile)" in proc.stdout
    # near 2^17 conventional judges element by element (docs/precision.md); near 2^20 the
    # float32 angles leave a position uncertain by more than one: it cannot judge there
    assert "FAIL my-rope/cpu/float32/eager/rope/case:near_2_17 (meets the conventional " \
           "profile)" in proc.stdout
    assert "layout='interleaved': only the half layout is implemented" not in proc.stdout
    proc = _posenc("conformance", "--backend", "./my_backend.py:BACKEND", "--encoding", "rope",
                   "--mode", "eager", "--dtype", "float16", "--only", "cases", "-q",
                   "--precision", "conventional", "--expectations", "gaps.yaml", "--json",
                   "r.json", cwd=tmp_path)
    import json

    results = json.loads((tmp_path / "r.json").read_text())["results"]
    llama = [e for e in results if e["name"] == "llama_head_dim_128"]
    assert llama and llama[0]["status"] in ("xfail", "xpass")


@pytest.mark.slow
def test_the_guides_pytest_command_runs(tmp_path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "my_backend.py").write_text(_block("# my_backend.py", "python"))
    command = _block("pytest --pyargs posenc.conformance", "bash").replace("\\\n", " ").split()
    assert command[:3] == ["pytest", "--pyargs", "posenc.conformance"]
    proc = subprocess.run([sys.executable, "-P", "-m", *command, "-q", "-p", "no:cacheprovider",
                           "--posenc-max-examples", "4"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # rope_phase_precision is not judgeable under conventional: skipped too
    assert "13 passed, 44 skipped" in proc.stdout


def test_the_guides_converted_pairing_runs_the_interleaved_cases(tmp_path, monkeypatch) -> None:
    pytest.importorskip("torch")
    import dataclasses
    import importlib

    from posenc.catalog import specs
    from posenc.conformance import check

    (tmp_path / "my_backend.py").write_text(_block("# my_backend.py", "python"))
    (tmp_path / "my_backend_converted.py").write_text(
        _block("# my_backend_converted.py", "python"))
    monkeypatch.syspath_prepend(str(tmp_path))
    backend = dataclasses.replace(importlib.import_module("my_backend_converted").BACKEND,
                                  dtypes=("float32",))
    keep = {"interleaved_default_positions", "negative_positions", "half_default_positions"}
    report = check(backend, "rope", properties=False, gradients=False,
                   precision="conventional", skip=[f"*/case:{c.name}" for c in
                                                   specs()["rope"].cases if c.name not in keep])
    assert report.passed and report.in_scope == 3, report.text()
    converted = {r.check.name for r in report.results if r.details.get("pairing")}
    assert converted == {"interleaved_default_positions", "negative_positions"}
