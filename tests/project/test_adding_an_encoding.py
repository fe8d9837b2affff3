"""Adding an encoding touches only its own files. In a copy of the package (laid out as the wheel
installs it: backends and conformance inside posenc/), a fixture encoding is added by its spec,
its reference and its implementation module, nothing else; the catalog finds it, `posenc golden
regen` writes its golden (every existing golden unchanged), and `posenc conformance` runs it on
NumPy and passes it, and fails a broken copy of it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..toy_encoding import IMPLEMENTATION, REFERENCE, SPEC

ROOT = Path(__file__).resolve().parents[2]

OWN_FILES = {"spec/toy_scale.yaml", "posenc/reference/toy_scale.py",
             "posenc/encodings/toy_scale.py"}


def _tree(root: Path) -> Path:
    """The package copied as a wheel lays it out, with spec/ and golden/ beside it."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "posenc", root / "posenc", ignore=ignore)
    for home in ("backends", "conformance"):
        shutil.copytree(ROOT / home, root / "posenc" / home, ignore=ignore)
    for folder in ("spec", "golden"):
        shutil.copytree(ROOT / folder, root / folder)
    return root


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def _posenc(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root), "POSENC_SPEC_DIR": str(root / "spec"),
           "POSENC_GOLDEN_DIR": str(root / "golden"), "POSENC_NO_COMPILE_CACHE": "1"}
    return subprocess.run([sys.executable, "-m", "posenc", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def added(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    """The copied tree with the fixture encoding added and its golden written; and the tree's
    files before the addition."""
    root = _tree(tmp_path_factory.mktemp("house"))
    before = _files(root)
    (root / "spec" / "toy_scale.yaml").write_text(SPEC)
    (root / "posenc" / "reference" / "toy_scale.py").write_text(REFERENCE)
    (root / "posenc" / "encodings" / "toy_scale.py").write_text(IMPLEMENTATION.format(factor="factor"))
    regen = _posenc(root, "golden", "regen", "toy_scale")
    assert regen.returncode == 0 and "written   toy_scale" in regen.stdout, regen.stdout + regen.stderr
    return root, before


def test_the_new_encoding_adds_files_and_edits_none(added) -> None:
    root, before = added
    after = _files(root)
    assert set(after) - set(before) == OWN_FILES | {"golden/toy_scale.npz"}
    edited = {name for name in before if after[name] != before[name]}
    assert edited == {"golden/manifest.json"}  # the golden index gains the new entry
    old, new = (json.loads(files["golden/manifest.json"]) for files in (before, after))
    assert set(new["encodings"]) - set(old["encodings"]) == {"toy_scale"}
    assert all(new["encodings"][i] == old["encodings"][i] for i in old["encodings"])


def test_the_catalog_the_goldens_and_conformance_take_it(added) -> None:
    root, _ = added
    check = _posenc(root, "golden", "check")
    assert check.returncode == 0, check.stdout + check.stderr
    run = _posenc(root, "conformance", "--backend", "numpy", "--encoding", "toy_scale", "--mode",
                  "eager", "--dtype", "float64")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "toy_scale  ok 2" in run.stdout and "2 passed, 0 failed" in run.stdout, run.stdout


def test_a_broken_copy_of_it_fails_conformance(added, tmp_path: Path) -> None:
    root, _ = added
    broken = tmp_path / "broken"
    shutil.copytree(root, broken, ignore=shutil.ignore_patterns("__pycache__"))
    (broken / "posenc" / "encodings" / "toy_scale.py").write_text(
        IMPLEMENTATION.format(factor="factor * factor"))
    run = _posenc(broken, "conformance", "--backend", "numpy", "--encoding", "toy_scale",
                  "--mode", "eager", "--dtype", "float64", "-q")
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    assert "failing encodings: toy_scale" in run.stdout, run.stdout[-2000:]
