"""examples/c/rope_check.c, a C program that reads the corpus's line manifest, checks a plain C
float32 rope (whenever a C compiler exists) and ggml's ggml_rope_ext (where ggml's headers and
libraries are found: $POSENC_GGML_PREFIX, or an importable ggml-python), and names the planted
bug a broken rope's output matches."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from posenc.conformance.corpus.export import export

from ..conftest import ROOT

SOURCE = ROOT / "examples" / "c" / "rope_check.c"
LINE = re.compile(r"^(PASS|FAIL|N/J |SKIP) (\S+)", re.M)


def _compiler() -> str:
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler on PATH (cc, gcc or $CC): the C consumer cannot be built")
    return cc


def _ggml_prefix() -> tuple[Path, Path]:
    """(folder of ggml.h, folder of libggml.so), or skip saying where it looked."""
    searched = [Path(p) for p in [os.environ.get("POSENC_GGML_PREFIX")] if p]
    try:
        import ggml  # ggml-python ships the headers and the libraries beside its package

        package = Path(ggml.__file__).parent
        searched += [package, package.parent / "include", package.parent / "lib"]
    except ImportError:
        pass
    headers = [p.parent for d in searched if d.is_dir() for p in d.rglob("ggml-cpu.h")]
    libraries = [p.parent for d in searched if d.is_dir() for p in d.rglob("libggml.so")]
    if not (headers and libraries):
        pytest.skip("ggml not found: set POSENC_GGML_PREFIX to a folder holding ggml.h, "
                    "ggml-cpu.h and libggml.so (e.g. a ggml-python site-packages), or pip "
                    "install ggml-python")
    return headers[0], libraries[0]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("c_corpus")
    export(root, encodings=["rope"], dtypes=["float32"], with_planted=True)
    return root


def _build_and_run(corpus: Path, out: Path, *flags: str, env: dict[str, str] | None = None
                   ) -> subprocess.CompletedProcess[str]:
    built = subprocess.run([_compiler(), "-O2", "-Wall", "-Werror", "-o", str(out), str(SOURCE),
                            *flags], capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    return subprocess.run([str(out), str(corpus)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def _verdicts(stdout: str) -> dict[str, str]:
    return {name: word.strip() for word, name in LINE.findall(stdout)}


def _assert_a_correct_rope(run: subprocess.CompletedProcess[str]) -> None:
    assert run.returncode == 0, run.stdout + run.stderr
    verdicts = _verdicts(run.stdout)
    assert "FAIL" not in verdicts.values()
    # the vectors of the parameters the example implements are checked, the rest skipped
    for name in ("half_default_positions", "interleaved_partial_rotary", "batched_left_padding",
                 "linear_scaling", "decode_one_token", "named_ministral_8b"):
        assert verdicts[name] == "PASS", run.stdout
    assert verdicts["near_2_20_llama3"] == "SKIP" and verdicts["ntk_scaling"] == "SKIP"
    assert re.search(r"^\d+ passed, 0 failed, \d+ not judgeable, \d+ skipped$", run.stdout, re.M)


def test_the_plain_c_rope_passes_the_rope_vectors(corpus: Path, tmp_path: Path) -> None:
    run = _build_and_run(corpus, tmp_path / "rope_check", "-lm")
    _assert_a_correct_rope(run)
    assert "plain C float32 rope" in run.stdout
    assert re.search(r"^PASS half_default_positions +error/allowed: exact [0-9.e-]+, "
                     r"conventional [0-9.e-]+, .*; meets exact$", run.stdout, re.M)


def test_a_swapped_pairing_fails_and_is_named(corpus: Path, tmp_path: Path) -> None:
    run = _build_and_run(corpus, tmp_path / "rope_planted", "-DPLANT_LAYOUT_SWAP", "-lm")
    assert run.returncode == 1, run.stdout + run.stderr
    assert _verdicts(run.stdout)["half_default_positions"] == "FAIL"
    assert re.search(r"^FAIL half_default_positions .*\n +matches planted bug: "
                     r"interleaved_for_half$", run.stdout, re.M)
    assert re.search(r"^FAIL interleaved_default_positions .*\n +matches planted bug: "
                     r"half_for_interleaved$", run.stdout, re.M)
    assert _verdicts(run.stdout)["two_dims"] == "PASS"  # one pair: both layouts agree


def test_bad_input_is_named(tmp_path: Path, corpus: Path) -> None:
    run = _build_and_run(tmp_path, tmp_path / "rope_check", "-lm")  # no manifest there
    assert run.returncode == 2 and "rope.manifest" in run.stderr
    broken = tmp_path / "broken"
    shutil.copytree(corpus, broken)
    manifest = (broken / "rope.manifest").read_text()
    (broken / "rope.manifest").write_text(manifest.replace("posenc-manifest 1.0", "posenc-manifest 2.0", 1))
    again = subprocess.run([str(tmp_path / "rope_check"), str(broken)], capture_output=True,
                           text=True, timeout=60)
    assert again.returncode == 2 and "corpus_version: not 1.x" in again.stderr


def test_ggml_rope_ext_passes_the_rope_vectors(corpus: Path, tmp_path: Path) -> None:
    _compiler()
    include, lib = _ggml_prefix()
    run = _build_and_run(corpus, tmp_path / "rope_ggml", "-DWITH_GGML", f"-I{include}",
                         f"-L{lib}", "-lggml", "-lggml-base", "-lggml-cpu", "-lm",
                         env={"LD_LIBRARY_PATH": str(lib)})
    assert "ggml_rope_ext against" in run.stdout, run.stdout + run.stderr
    _assert_a_correct_rope(run)
