from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent


def run_python(code: str, *, cwd: Path | None = None, env: dict[str, str] | None = None,
               timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``python -c code`` in a fresh interpreter (for import-side-effect checks)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=cwd or TESTS, env={**os.environ, **(env or {})}, timeout=timeout)


def run_cli(*args: str, env: dict[str, str] | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "posenc", *args], capture_output=True, text=True,
                          cwd=TESTS, env={**os.environ, **(env or {})}, timeout=timeout)


@pytest.fixture
def tmp_golden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty golden folder that posenc uses instead of the shipped one."""
    directory = tmp_path / "golden"
    directory.mkdir()
    monkeypatch.setenv("POSENC_GOLDEN_DIR", str(directory))
    return directory


@pytest.fixture
def tmp_specs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the shipped spec folder that posenc uses instead of the original."""
    from posenc.paths import spec_dir

    directory = tmp_path / "spec"
    directory.mkdir()
    for src in spec_dir().iterdir():
        (directory / src.name).write_bytes(src.read_bytes())
    monkeypatch.setenv("POSENC_SPEC_DIR", str(directory))
    return directory


BACKENDS = ["numpy", "strict", "torch", "jax", "tensorflow"]
REQUIRES = {"strict": "array_api_strict", "torch": "torch", "jax": "jax",
            "tensorflow": "tensorflow"}


@pytest.fixture(params=BACKENDS)
def pe(request: pytest.FixtureRequest):
    """posenc.backends.<name> (skipped when the framework is not installed)."""
    if request.param in REQUIRES:
        pytest.importorskip(REQUIRES[request.param])
    return importlib.import_module(f"posenc.backends.{request.param}")


# Wall time under ``-n auto``: a parallel run lasts as long as its busiest worker, so the tests
# marked ``slow`` (subprocesses, compiles: 10-60 s each) start first and the many quick ones
# fill in behind them; none of the slow ones is left to run alone at the end.
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # optional: xdist may be absent
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``-n``'s default scheduling (``load``) as work stealing: each worker takes half the
    tests, slow ones first, and an idle worker takes the back of a busy one's queue (``load``
    would hand the first worker every slow test in one fixed batch). Another ``--dist`` stands."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import WorkStealingScheduling

    return WorkStealingScheduling(config, log)
