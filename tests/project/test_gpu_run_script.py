"""benchmarks/gpu/run.sh, the one prepared call on a lent GPU, checked on CPU: its syntax, and a
dry run that lists every step and parses every conformance command line with posenc's own
parser (a typo in an option would otherwise cost a GPU session)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu" / "run.sh"
needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


@needs_bash
def test_the_gpu_script_parses() -> None:
    proc = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@needs_bash
def test_the_quick_dry_run_plans_bench_profile_and_cuda_conformance(tmp_path: Path) -> None:
    env = {**os.environ, "DRY_RUN": "1", "PYTHON": sys.executable, "OUT": str(tmp_path)}
    proc = subprocess.run(["bash", str(SCRIPT), "quick"], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    steps = [line for line in proc.stdout.splitlines() if line.startswith("+ [")]
    assert any("posenc bench --device cuda --suite gpu" in s for s in steps), steps
    assert any("profile_rope.py" in s for s in steps), steps
    conformance = [s for s in steps if "posenc conformance" in s]
    backends = {s.split("--backend ")[1].split()[0] for s in conformance}
    assert backends == {"torch", "torch-triton", "torch-layers", "jax"}, backends
    assert all("--device cuda" in s and f"--json {tmp_path}" in s for s in conformance)
    modes = {(s.split("--backend ")[1].split()[0], s.split("--mode ")[1].split()[0])
             for s in conformance}
    assert {("torch", "eager"), ("torch", "compiled"), ("torch-triton", "eager"),
            ("torch-triton", "compiled"), ("torch-layers", "eager"), ("torch-layers", "compiled"),
            ("jax", "eager"), ("jax", "compiled")} <= modes
    assert not list(tmp_path.iterdir())  # a dry run writes nothing


@needs_bash
def test_a_bad_option_in_the_script_fails_the_dry_run(tmp_path: Path) -> None:
    """The dry run's parser check is real: the same script with a misspelt option fails."""
    broken = tmp_path / "run.sh"
    broken.write_text(SCRIPT.read_text().replace("--compiled-cases 4", "--compiled-casez 4"))
    env = {**os.environ, "DRY_RUN": "1", "PYTHON": sys.executable, "OUT": str(tmp_path / "o")}
    proc = subprocess.run(["bash", str(broken), "quick"], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)
    assert proc.returncode != 0
    assert "--compiled-casez" in proc.stderr
