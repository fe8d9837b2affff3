"""Golden lifecycle: regen is reproducible and selective; check finds missing, orphaned, stale,
corrupt and drifted goldens, naming the encoding."""

from __future__ import annotations

import hashlib
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest

from posenc import golden
from posenc.catalog import specs
from posenc.errors import GoldenError

from ..conftest import run_cli


def _bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_shipped_goldens_pass_check() -> None:
    assert golden.check() == []


def test_cli_check_passes_on_the_shipped_goldens() -> None:
    proc = run_cli("golden", "check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all goldens match" in proc.stdout


def test_regen_is_byte_reproducible(tmp_golden: Path) -> None:
    golden.regen()
    first = _bytes(tmp_golden)
    assert set(first) == {"manifest.json", *(f"{i}.npz" for i in specs())}
    golden.regen(everything=True)
    assert _bytes(tmp_golden) == first
    assert golden.check() == []


def test_regen_writes_only_what_changed(tmp_golden: Path, tmp_specs: Path) -> None:
    golden.regen()
    before = _bytes(tmp_golden)
    assert {a for _, a in golden.regen()} == {"unchanged"}
    rope = tmp_specs / "rope.yaml"
    rope.write_text(rope.read_text().replace("seed: 9}}", "seed: 99}}"))
    assert golden.check()[0].kind == "stale"
    actions = dict(golden.regen())
    assert actions["rope"] == "written" and actions["sinusoidal"] == "unchanged"
    after = _bytes(tmp_golden)
    assert after["rope.npz"] != before["rope.npz"]
    for name in ("learned.npz", "sinusoidal.npz"):
        assert after[name] == before[name]
    assert golden.check() == []


def test_formatting_only_spec_edit_is_not_stale(tmp_golden: Path, tmp_specs: Path) -> None:
    golden.regen()
    rope = tmp_specs / "rope.yaml"
    rope.write_text("# reviewed\n\n" + rope.read_text().replace("params: {}", "params:   {}"))
    assert golden.check() == []


def test_missing_and_orphaned(tmp_golden: Path, tmp_specs: Path) -> None:
    golden.regen()
    (tmp_golden / "learned.npz").unlink()
    (tmp_specs / "sinusoidal.yaml").unlink()
    problems = {(p.encoding, p.kind) for p in golden.check()}
    assert ("learned", "missing") in problems
    assert ("sinusoidal", "orphaned") in problems
    actions = dict(golden.regen())
    assert actions["sinusoidal"] == "removed" and actions["learned"] == "written"
    assert not (tmp_golden / "sinusoidal.npz").exists()
    assert golden.check() == []


def test_corrupt_file_is_named(tmp_golden: Path) -> None:
    golden.regen()
    path = tmp_golden / "rope.npz"
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    path.write_bytes(bytes(blob))
    problems = golden.check()
    assert [(p.encoding, p.kind) for p in problems] == [("rope", "corrupt")]
    assert "rope.npz" in problems[0].detail and "sha256" in problems[0].detail
    with pytest.raises(GoldenError, match=r"rope\.npz: corrupt golden"):
        golden.load(specs()["rope"])


def test_truncated_file_with_matching_hash_is_corrupt(tmp_golden: Path) -> None:
    golden.regen()
    path = tmp_golden / "learned.npz"
    path.write_bytes(path.read_bytes()[:100])
    manifest = json.loads((tmp_golden / "manifest.json").read_text())
    manifest["encodings"]["learned"]["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (tmp_golden / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(GoldenError, match=r"learned\.npz: corrupt golden: cannot read it"):
        golden.load(specs()["learned"])


def test_corrupt_manifest(tmp_golden: Path) -> None:
    (tmp_golden / "manifest.json").write_text("{not json")
    assert [p.kind for p in golden.check()] == ["corrupt"]


def test_numerical_drift_is_found(tmp_golden: Path) -> None:
    """A golden edited consistently (hash updated) but numerically wrong is 'drifted'."""
    golden.regen()
    path = tmp_golden / "sinusoidal.npz"
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    arrays["interleaved_d6/out"][1, 2] += 1e-9
    blob = golden.npz_bytes(arrays)
    path.write_bytes(blob)
    manifest = json.loads((tmp_golden / "manifest.json").read_text())
    manifest["encodings"]["sinusoidal"]["sha256"] = hashlib.sha256(blob).hexdigest()
    (tmp_golden / "manifest.json").write_text(json.dumps(manifest))
    problems = golden.check()
    assert [(p.encoding, p.kind) for p in problems] == [("sinusoidal", "drifted")]
    assert "interleaved_d6/out" in problems[0].detail and "(1, 2)" in problems[0].detail


def test_goldens_hold_no_pickles() -> None:
    from posenc.paths import golden_dir

    for path in golden_dir().glob("*.npz"):
        with np.load(path, allow_pickle=False) as data:
            for key in data.files:
                assert data[key].dtype.kind in "fibc", (path.name, key)


def test_npz_bytes_is_readable_by_numpy() -> None:
    arrays = {"a/out": np.arange(6.0).reshape(2, 3), "a/in/p": np.arange(3)}
    with np.load(io.BytesIO(golden.npz_bytes(arrays))) as data:
        assert sorted(data.files) == sorted(arrays)
        np.testing.assert_array_equal(data["a/out"], arrays["a/out"])


def test_catalogue_check_row() -> None:
    """CATALOGUE.md: 'd=6 interleaved' at position 1 = [0.841471 0.540302 0.046399 0.998923
    0.002154 0.999998] (six-digit values quoted from the catalogue, not from posenc)."""
    case = golden.load(specs()["sinusoidal"]).cases["interleaved_d6"]
    quoted = [0.841471, 0.540302, 0.046399, 0.998923, 0.002154, 0.999998]
    np.testing.assert_allclose(case.output[1], quoted, atol=5e-7)


def test_rope_two_dims_golden_by_hand() -> None:
    """d = 2, base 10: one pair rotated by m radians, written out with math.cos/math.sin."""
    case = golden.load(specs()["rope"]).cases["two_dims"]
    x, positions = case.inputs["x"], case.inputs["positions"]
    for row, m in enumerate(positions):
        a, b = x[row]
        expected = [a * math.cos(m) - b * math.sin(m), b * math.cos(m) + a * math.sin(m)]
        np.testing.assert_allclose(case.output[row], expected, rtol=1e-15, atol=1e-15)


def test_a_reference_helper_stales_only_the_references_that_import_it(monkeypatch) -> None:
    rope, sinusoidal = specs()["rope"], specs()["sinusoidal"]
    before = golden.reference_hash(rope), golden.reference_hash(sinusoidal)
    read_text = Path.read_text

    def edited(path: Path, *args, **kwargs) -> str:
        text = read_text(path, *args, **kwargs)
        return text + "\n# edited\n" if path.as_posix().endswith("rotary/schedules.py") else text

    monkeypatch.setattr(Path, "read_text", edited)
    assert golden.reference_hash(rope) != before[0]  # rope's reference imports the schedules
    assert golden.reference_hash(sinusoidal) == before[1]
