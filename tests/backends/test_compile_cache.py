"""The harness's persistent compilation caches: JAX's under posenc's cache folder for the run
only (the caller's settings come back), none with POSENC_NO_COMPILE_CACHE, and a corrupt
cache is recompiled around, never a wrong pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from posenc.conformance import Options, run

jax = pytest.importorskip("jax")


def _run_jitted() -> list:
    return run(Options(backends=["jax"], encodings=["alibi_slopes"], dtypes=["float32"],
                       modes=["compiled"], properties=False, gradients=False))


def _entries(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def test_jit_compiles_land_in_the_cache_and_the_settings_come_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("POSENC_NO_COMPILE_CACHE", raising=False)
    before = jax.config.jax_compilation_cache_dir
    results = _run_jitted()
    assert {r.status for r in results} == {"pass"}
    assert _entries(tmp_path / "jax"), "no compilation cached"
    assert jax.config.jax_compilation_cache_dir == before

    for entry in _entries(tmp_path / "jax"):  # garbage in every entry: recompiled, still right
        entry.write_bytes(b"not a compiled executable")
    assert {r.status for r in _run_jitted()} == {"pass"}


def test_no_cache_when_switched_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("POSENC_NO_COMPILE_CACHE", "1")
    assert {r.status for r in _run_jitted()} == {"pass"}
    assert not _entries(tmp_path / "jax")


def test_inductor_caches_under_posenc_and_the_environment_comes_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    import os

    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("POSENC_NO_COMPILE_CACHE", raising=False)
    results = run(Options(backends=["torch"], encodings=["alibi_slopes"], dtypes=["float32"],
                          modes=["compiled"], properties=False, gradients=False,
                          compiled_cases=1))
    assert {r.status for r in results} == {"pass"}
    assert _entries(tmp_path / "inductor")
    # afterwards Inductor is back on its own folder (it writes its default into the variable)
    assert not os.environ.get("TORCHINDUCTOR_CACHE_DIR", "").startswith(str(tmp_path))
