"""`posenc export`: the corpus validates against its shipped schema, reads back into exactly the
goldens (loaded independently with posenc.golden), carries the flags a consumer needs, and a
damaged or newer corpus is refused naming the file and the field."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from posenc import catalog, cli, golden
from posenc.conformance.corpus.export import export
from posenc.corpus import CorpusError, read
from posenc.reference import rope as rope_reference

SUBSET = ["rope", "t5_bucket", "complex_order"]  # float, int and complex outputs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    export(root, encodings=SUBSET, with_planted=True)
    return root


def _json_files(root: Path) -> list[Path]:
    return sorted(root.glob("*.json"))


def _assert_bitwise(a: np.ndarray | None, b: np.ndarray | None, where: str) -> None:
    assert (a is None) == (b is None), where
    if a is not None and b is not None:
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert a.tobytes() == b.tobytes(), where


def _assert_same_as_goldens(read_back: dict, encodings: list[str]) -> None:
    assert sorted(read_back) == sorted(encodings)
    for encoding in encodings:
        stored = golden.load(catalog.specs()[encoding]).cases
        assert list(read_back[encoding]) == list(stored), encoding
        for name, case in stored.items():
            got = read_back[encoding][name]
            assert got.params == case.params and got.angle_bound == case.angle_bound
            assert list(got.inputs) == list(case.inputs)
            for key in case.inputs:
                _assert_bitwise(got.inputs[key], case.inputs[key], f"{encoding}/{name}/{key}")
            _assert_bitwise(got.output, case.output, f"{encoding}/{name}/out")


def test_every_file_validates_against_the_schema_written_at_the_root(corpus: Path) -> None:
    schema = json.loads((corpus / "schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    files = _json_files(corpus)
    assert {p.name for p in files} == {"corpus.json", "schema.json", *(f"{e}.json" for e in SUBSET)}
    for path in files:
        if path.name != "schema.json":
            validator.validate(json.loads(path.read_text()))
    index = json.loads((corpus / "corpus.json").read_text())
    assert index["corpus_version"] == schema["corpus_version"] == "1.0"


def test_the_corpus_reads_back_into_exactly_the_goldens(corpus: Path) -> None:
    _assert_same_as_goldens(read(corpus), SUBSET)


def test_array_records_describe_the_raw_little_endian_files(corpus: Path) -> None:
    doc = json.loads((corpus / "rope.json").read_text())
    record = doc["vectors"][0]["output"]
    data = (corpus / record["path"]).read_bytes()
    assert len(data) == record["byte_length"] == 8 * int(np.prod(record["shape"]))
    assert hashlib.sha256(data).hexdigest() == record["sha256"]
    expected = golden.load(catalog.specs()["rope"]).cases[doc["vectors"][0]["name"]].output
    assert np.array_equal(np.frombuffer(data, "<f8").reshape(record["shape"]), expected)


def test_tolerances_carry_every_profile_with_its_reason(corpus: Path) -> None:
    doc = json.loads((corpus / "rope.json").read_text())
    assert sorted(doc["tolerances"]) == ["bfloat16", "float16", "float32", "float64"]
    float32 = doc["tolerances"]["float32"]
    assert sorted(float32) == ["conventional", "exact", "reduced"]
    # rope's own spec: float32 exact-phase rotation, no angle term (spec/rope.yaml)
    assert float32["exact"]["angle"] == 0.0 and float32["conventional"]["angle"] > 0.0
    assert "conventional" in float32["conventional"]["reason"]
    assert float32["exact"]["angle_eps"] == 2.0**-23


def test_flags_name_the_planted_bugs_a_vector_tells_apart(corpus: Path) -> None:
    doc = json.loads((corpus / "rope.json").read_text())
    vectors = {v["name"]: v for v in doc["vectors"]}
    half = vectors["half_default_positions"]  # layout half, x [2, 3, 8, 16]
    flags = {f["diagnosis"]: f for f in half["flags"]}
    assert "interleaved_for_half" in flags and "positions_plus_one" in flags
    stored = golden.load(catalog.specs()["rope"]).cases["half_default_positions"]
    swapped = rope_reference.rope(stored.inputs["x"], None, base=10000.0, layout="interleaved",
                                  rotary_dim=None, scaling=None, seq_len=None)
    planted = flags["interleaved_for_half"]["planted"]
    got = np.frombuffer((corpus / planted["path"]).read_bytes(), "<f8").reshape(planted["shape"])
    assert np.array_equal(got, swapped)
    # two features: half and interleaved pairing are the same rotation, nothing to tell apart
    two = {f["diagnosis"] for f in vectors["two_dims"]["flags"]}
    assert "interleaved_for_half" not in two and "half_for_interleaved" not in two


def test_filters_dtype_and_named_model(tmp_path: Path) -> None:
    export(tmp_path / "f32", encodings=["rope"], dtypes=["float32"])
    doc = json.loads((tmp_path / "f32" / "rope.json").read_text())
    assert list(doc["tolerances"]) == ["float32"]
    assert all(f["distinguishable_in"] == ["float32"] and "planted" not in f
               for v in doc["vectors"] for f in v["flags"])
    export(tmp_path / "llama", models=["llama-3.1-8b"])
    index = json.loads((tmp_path / "llama" / "corpus.json").read_text())
    assert index["filters"]["models"] == ["llama-3.1-8b"]
    rope = json.loads((tmp_path / "llama" / "rope.json").read_text())
    names = [v["name"] for v in rope["vectors"]]
    assert "named_llama_3_1_8b" in names and "half_default_positions" not in names
    assert all(v["resolved_params"]["scaling"]["rope_type"] == "llama3" for v in rope["vectors"])


def test_the_manifest_lists_each_vector_with_its_arrays(corpus: Path) -> None:
    lines = (corpus / "rope.manifest").read_text().splitlines()
    head = lines[0].split()
    doc = json.loads((corpus / "rope.json").read_text())
    assert head == ["posenc-manifest", "1.0", "rope", str(len(doc["vectors"]))]
    assert sum(line.startswith("vector ") for line in lines) == len(doc["vectors"])
    assert sum(line == "end" for line in lines) == len(doc["vectors"])
    assert all(line == "end" or (len(line.split()) >= 2 and "\t" not in line) for line in lines)
    out = next(line.split() for line in lines if line.startswith("output "))
    record = doc["vectors"][0]["output"]
    assert out[1:] == [record["path"], "float64", str(len(record["shape"])),
                       *map(str, record["shape"])]


# -- bad input: each error names the file and the field ---------------------------------------
def _copy(corpus: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(corpus, tmp_path / "copy"))


def _first_output(root: Path) -> tuple[dict, Path]:
    record = json.loads((root / "rope.json").read_text())["vectors"][0]["output"]
    return record, root / record["path"]


def test_a_missing_array_file_names_it_and_the_field(corpus: Path, tmp_path: Path) -> None:
    root = _copy(corpus, tmp_path)
    _, path = _first_output(root)
    path.unlink()
    with pytest.raises(CorpusError, match=r"rope\.json: vectors\[0\]\.output\.path: the array "
                                          r"file .*out\.bin does not exist"):
        read(root, ["rope"])


def test_a_size_mismatch_names_the_byte_length(corpus: Path, tmp_path: Path) -> None:
    root = _copy(corpus, tmp_path)
    record, path = _first_output(root)
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(CorpusError, match=rf"rope\.json: vectors\[0\]\.output\.byte_length: "
                                          rf".* has {record['byte_length'] - 8} bytes, the "
                                          rf"corpus says {record['byte_length']}"):
        read(root, ["rope"])


def test_a_changed_array_names_the_sha256(corpus: Path, tmp_path: Path) -> None:
    root = _copy(corpus, tmp_path)
    _, path = _first_output(root)
    data = bytearray(path.read_bytes())
    data[0] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(CorpusError, match=r"rope\.json: vectors\[0\]\.output\.sha256: .* hashes "
                                          r"to [0-9a-f]{64}, the corpus says"):
        read(root, ["rope"])


@pytest.mark.parametrize("file", ["corpus.json", "rope.json", "schema.json"])
def test_an_unknown_major_version_is_refused(corpus: Path, tmp_path: Path, file: str) -> None:
    root = _copy(corpus, tmp_path)
    data = json.loads((root / file).read_text())
    data["corpus_version"] = "2.0"
    (root / file).write_text(json.dumps(data))
    with pytest.raises(CorpusError, match=rf"{file}: corpus_version: '2\.0' is not a corpus "
                                          rf"version this reader knows \(posenc reads 1\.x"):
        read(root)


def test_a_newer_minor_version_with_added_fields_is_read(corpus: Path, tmp_path: Path) -> None:
    root = _copy(corpus, tmp_path)
    for file in ("corpus.json", "rope.json"):
        data = json.loads((root / file).read_text())
        data.update(corpus_version="1.7", added_in_1_7={"anything": 1})
        (root / file).write_text(json.dumps(data))
    assert list(read(root, ["rope"])["rope"]) == [c.name for c in catalog.specs()["rope"].cases]


def test_a_schema_violation_names_the_field(corpus: Path, tmp_path: Path) -> None:
    root = _copy(corpus, tmp_path)
    data = json.loads((root / "rope.json").read_text())
    del data["vectors"][2]["inputs"][0]["array"]["sha256"]
    (root / "rope.json").write_text(json.dumps(data))
    with pytest.raises(CorpusError, match=r"rope\.json: vectors\[2\]\.inputs\[0\]\.array: "
                                          r"'sha256' is a required property"):
        read(root, ["rope"])


def test_an_encoding_not_in_the_corpus_is_named(corpus: Path) -> None:
    with pytest.raises(CorpusError, match=r"corpus\.json: encodings: 'sinusoidal' not in the "
                                          r"corpus \(it has: rope, t5_bucket, complex_order\)"):
        read(corpus, ["sinusoidal"])


# -- the command ------------------------------------------------------------------------------
def test_cli_export_and_its_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "c"
    assert cli.main(["export", "--encoding", "alibi_slopes", "--dtype", "float32", "-o",
                     str(out)]) == 0
    assert "1 encoding(s)" in capsys.readouterr().err
    assert (out / "alibi_slopes.json").is_file() and (out / "schema.json").is_file()
    assert cli.main(["export", "--encoding", "nope_not_here", "-o", str(tmp_path / "d")]) == 2
    assert "--encoding 'nope_not_here' is not an encoding" in capsys.readouterr().err
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    assert cli.main(["export", "--encoding", "rope", "-o", str(tmp_path / "busy")]) == 2
    assert "non-empty folder without corpus.json" in capsys.readouterr().err
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"
    assert cli.main(["export", "--model", "no-such-model", "-o", str(tmp_path / "e")]) == 2
    assert "named='no-such-model' is not a named configuration" in capsys.readouterr().err


@pytest.mark.slow
def test_the_full_export_reads_back_into_every_golden(tmp_path: Path) -> None:
    start = time.perf_counter()
    summary = export(tmp_path / "all")
    assert summary.encodings == len(catalog.specs())
    assert summary.vectors == sum(len(s.cases) for s in catalog.specs().values())
    _assert_same_as_goldens(read(tmp_path / "all"), list(catalog.specs()))
    assert time.perf_counter() - start < 60  # about 10 s on two cores
