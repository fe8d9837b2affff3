"""A broken golden is blamed on the golden, never on the backend: ``conformance`` verifies each
golden before judging a backend against it, reports each problem once naming the file, the
case and the array, and keeps judging the cases the problem does not touch."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from posenc.conformance import Options, golden_gate, run
from posenc.golden import npz_bytes
from posenc.paths import golden_dir

from ..conftest import run_cli


@pytest.fixture
def goldens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the shipped goldens that posenc uses instead of the originals."""
    directory = tmp_path / "golden"
    shutil.copytree(golden_dir(), directory)
    monkeypatch.setenv("POSENC_GOLDEN_DIR", str(directory))
    return directory


def _edit(directory: Path, spec_id: str, edit) -> None:
    """Rewrite ``<spec_id>.npz`` through ``edit(arrays)`` and update its sha256 (a consistent
    hand edit: only a regeneration can tell it from the truth)."""
    path = directory / f"{spec_id}.npz"
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    edit(arrays)
    blob = npz_bytes(arrays)
    path.write_bytes(blob)
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["encodings"][spec_id]["sha256"] = hashlib.sha256(blob).hexdigest()
    (directory / "manifest.json").write_text(json.dumps(manifest))


def _rope_cases() -> dict[str, object]:
    options = Options(backends=["numpy"], dtypes=["float64"], modes=["eager"], encodings=["rope"],
                      properties=False, gradients=False)
    return {r.check.name: r for r in run(options)}


def _only_golden_errors(results: dict, spoilt: set[str]) -> None:
    bad = {name for name, r in results.items() if r.status != "pass"}
    assert bad == spoilt, {n: results[n].message for n in bad}
    for name in spoilt:
        result = results[name]
        assert result.status == "error" and result.details["blame"] == "golden", result
        assert result.message.startswith("golden error: ") and "rope.npz" in result.message
        assert "posenc golden regen rope" in result.message


def test_a_drifted_value_blames_the_golden_not_the_backend(goldens: Path) -> None:
    def drift(arrays):
        arrays["linear_scaling/out"] = arrays["linear_scaling/out"] * (1 + 1e-9)

    _edit(goldens, "rope", drift)
    results = _rope_cases()
    _only_golden_errors(results, {"linear_scaling"})
    assert "'linear_scaling/out'" in results["linear_scaling"].message
    assert "drifted" in results["linear_scaling"].message


def test_a_drift_after_a_clean_run_in_the_same_process_is_still_found(goldens: Path) -> None:
    """Each case's regeneration is kept for the process (conformance/golden_gate.py); the
    stored numbers are read and compared on every run."""
    assert {r.status for r in _rope_cases().values()} == {"pass"}

    def drift(arrays):
        arrays["two_dims/out"] = arrays["two_dims/out"] * (1 + 1e-9)

    _edit(goldens, "rope", drift)
    _only_golden_errors(_rope_cases(), {"two_dims"})


def test_an_output_stored_as_float32_blames_the_golden(goldens: Path) -> None:
    def narrow(arrays):
        arrays["two_dims/out"] = arrays["two_dims/out"].astype(np.float32)

    _edit(goldens, "rope", narrow)
    results = _rope_cases()
    _only_golden_errors(results, {"two_dims"})
    assert "dtype float32" in results["two_dims"].message


def test_a_missing_required_input_is_a_golden_error_not_a_type_error(goldens: Path) -> None:
    _edit(goldens, "rope", lambda arrays: arrays.pop("linear_scaling/in/x"))
    results = _rope_cases()
    _only_golden_errors(results, {"linear_scaling"})
    message = results["linear_scaling"].message
    assert "array 'linear_scaling/in/x'" in message and "required input 'x'" in message
    assert "TypeError" not in message


def test_a_missing_optional_input_the_case_declares_is_a_golden_error(goldens: Path) -> None:
    """Read as an omitted optional argument, the case would run with arange positions."""
    _edit(goldens, "rope", lambda arrays: arrays.pop("two_dims/in/positions"))
    _only_golden_errors(_rope_cases(), {"two_dims"})


def test_one_missing_case_spoils_only_that_case(goldens: Path) -> None:
    _edit(goldens, "rope", lambda arrays: arrays.pop("linear_scaling/out"))
    results = _rope_cases()
    assert len(results) > 20
    _only_golden_errors(results, {"linear_scaling"})
    assert "array 'linear_scaling/out'" in results["linear_scaling"].message


def test_a_spec_edited_without_a_regen_blames_the_stale_golden(
        goldens: Path, tmp_specs: Path) -> None:
    rope = tmp_specs / "rope.yaml"
    text = rope.read_text()
    assert text.count("seed: 13}") == 1
    rope.write_text(text.replace("seed: 13}", "seed: 113}"))  # linear_scaling's x
    results = _rope_cases()
    _only_golden_errors(results, {"linear_scaling"})
    assert "the spec changed" in results["linear_scaling"].message
    # the unchanged cases were judged, under a staleness warning given once
    assert any("stale" in w for w in results["two_dims"].details["golden_warnings"])
    text = golden_gate.summary(results.values())
    assert text.count("golden warning:") == 1
    errors = [line for line in text.splitlines() if line.startswith("golden error:")]
    assert errors and all("case 'linear_scaling'" in line for line in errors), text


def test_a_corrupt_file_spoils_every_case_as_a_golden_error(goldens: Path) -> None:
    path = goldens / "rope.npz"
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    path.write_bytes(bytes(blob))
    results = _rope_cases()
    _only_golden_errors(results, set(results))
    assert "sha256" in results["two_dims"].message


def test_the_cli_reports_a_golden_problem_once(goldens: Path) -> None:
    _edit(goldens, "rope", lambda arrays: arrays.pop("linear_scaling/in/x"))
    proc = run_cli("conformance", "--backend", "numpy", "--encoding", "rope", "--dtype",
                   "float64", "--dtype", "float32", "--mode", "eager", "--only", "cases",
                   "--quiet", env={"POSENC_GOLDEN_DIR": str(goldens)})
    assert proc.returncode != 0
    summary = [line for line in proc.stdout.splitlines() if line.startswith("golden error:")]
    assert len(summary) == 1, proc.stdout
    assert "linear_scaling/in/x" in summary[0] and summary[0].endswith("[2 check(s)]")
    assert not any(line.startswith("FAIL ") for line in proc.stdout.splitlines())


def test_an_expected_backend_failure_does_not_hide_a_broken_golden(goldens: Path) -> None:
    _edit(goldens, "rope", lambda arrays: arrays.pop("two_dims/out"))
    options = Options(backends=["numpy"], dtypes=["float64"], modes=["eager"], encodings=["rope"],
                      properties=False, gradients=False,
                      expectations={"*/rope/case:*": "known backend bug"})
    results = {r.check.name: r.status for r in run(options)}
    assert results["two_dims"] == "error"
    assert results["linear_scaling"] == "xpass"
