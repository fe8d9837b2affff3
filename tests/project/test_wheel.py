"""A plain (non-editable) wheel carries spec/ and golden/ and works from any directory."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ..conftest import ROOT


def _meets_build_requirement() -> bool:
    import setuptools

    major = int(setuptools.__version__.split(".")[0])
    return major >= 77  # pyproject.toml: requires = ["setuptools>=77", "wheel"]


@pytest.mark.slow
def test_wheel_ships_spec_and_goldens_and_works_elsewhere(tmp_path: Path) -> None:
    pytest.importorskip("setuptools")
    # build from a copy: setuptools leaves build/ behind, and stale files there can leak into
    # later wheels of the checkout
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".*venv*", "build", "dist", "*.egg-info", "__pycache__", ".*cache*"))
    dist = tmp_path / "dist"
    # the environment's setuptools when it meets pyproject's build requirement (no download);
    # otherwise pip's isolated build environment (python -m venv still brings setuptools 65)
    isolation = ["--no-build-isolation"] if _meets_build_requirement() else []
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-w", str(dist),
         str(source)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = dist.glob("posenc-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {"posenc": "posenc", "backends": "posenc/backends",
               "conformance": "posenc/conformance", "spec": "posenc/spec", "golden": "posenc/golden"}
    for source, target in shipped.items():
        for path in (ROOT / source).rglob("*"):
            if (path.suffix in (".py", ".pyi", ".yaml", ".json", ".npz") or path.name == "py.typed") \
                    and "__pycache__" not in path.parts:
                assert f"{target}/{path.relative_to(ROOT / source).as_posix()}" in names, path
    assert not any(n.startswith(("tests/", "spec/", "golden/")) for n in names)

    site = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(site), str(wheel)],
        capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = (
        "import posenc, posenc.paths as p\n"
        f"assert p.spec_dir().is_relative_to({str(site)!r}), p.spec_dir()\n"
        "from posenc import golden\n"
        "assert golden.check() == [], golden.check()\n"
        "from posenc.backends import installed_backends\n"
        "assert 'numpy' in installed_backends()\n"
        "from posenc.conformance import Options, run\n"
        "r = run(Options(backends=['numpy'], modes=['eager'], dtypes=['float32'], max_examples=2))\n"
        "flex = [x for x in r if 'flex_score_mod' in x.check.name]  # torch-only properties\n"
        "assert flex and all(x.status == 'unsupported' for x in flex)\n"
        "assert r and all(x.status == 'pass' for x in r if x not in flex)\n"
        "print('ok')\n"
    )
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=elsewhere, env=env, timeout=300)
    assert proc.stdout.strip() == "ok", proc.stderr[-3000:]
