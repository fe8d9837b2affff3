"""Spec loading: validation errors name the file, the key path and the reason; hashing ignores
comments and formatting."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from posenc.catalog import specs
from posenc.errors import SpecError
from posenc.paths import spec_dir
from posenc.specs import load_spec_file


def test_schema_is_a_valid_json_schema() -> None:
    schema = json.loads((spec_dir() / "schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)


def test_every_shipped_spec_loads() -> None:
    loaded = specs()
    assert {"sinusoidal", "learned", "rope", "attention", "complex_order"} <= set(loaded)
    for spec in loaded.values():
        assert spec.cases and spec.family in {"absolute", "relative", "rotary", "other", "operator"}


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def _rope_text() -> str:
    return (spec_dir() / "rope.yaml").read_text()


def test_comment_and_formatting_edits_keep_the_hash(tmp_path: Path) -> None:
    original = load_spec_file(spec_dir() / "rope.yaml").content_hash()
    data = yaml.safe_load(_rope_text())
    reformatted = "# a new comment\n" + yaml.safe_dump(data, sort_keys=True, indent=4, width=60)
    edited = load_spec_file(_write(tmp_path, "rope", reformatted))
    assert edited.content_hash() == original


def test_a_value_edit_changes_the_hash(tmp_path: Path) -> None:
    original = load_spec_file(spec_dir() / "rope.yaml").content_hash()
    edited = load_spec_file(_write(tmp_path, "rope", _rope_text().replace(
        "base: 500000.0", "base: 500001.0")))
    assert edited.content_hash() != original


def test_scientific_notation_is_a_float(tmp_path: Path) -> None:
    spec = load_spec_file(_write(tmp_path, "rope", _rope_text().replace(
        "base: 500000.0", "base: 5e5")))
    assert spec.case("llama_head_dim_128").params["base"] == 500000.0


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (("title:", "titel: x\ntitle:"), r"rope\.yaml: invalid spec:\n  <top level>: Additional "
                                         r"properties are not allowed \('titel' was unexpected\)"),
        (("params: {layout: interleaved}\n    inputs:\n      x: {normal: {shape: [2, 3, 8, 16], "
          "seed: 2}}", "params: {layuot: interleaved}\n    inputs:\n      x: {normal: {shape: "
          "[2, 3, 8, 16], seed: 2}}"),
         r"rope\.yaml: cases\[4\] \(interleaved_default_positions\)\.params\.layuot: unknown "
         r"parameter 'layuot' \(known: base, "
         r"layout, rotary_dim, scaling, seq_len\)"),
        (("params: {layout: interleaved}\n    inputs:\n      x: {normal: {shape: [2, 3, 8, 16], "
          "seed: 2}}", "params: {layout: diagonal}\n    inputs:\n      x: {normal: {shape: "
          "[2, 3, 8, 16], seed: 2}}"),
         r"rope\.yaml: cases\[4\] \(interleaved_default_positions\)\.params: parameter "
         r"layout='diagonal': 'diagonal' is not one of"),
        (("seed: 1}}", "seed: -1}}"),
         r"cases\[3\] \(half_default_positions\)\.inputs\.x\.normal\.seed: -1 is less than the minimum of 0"),
        (("family: rotary", "family: rotational"), r"family: 'rotational' is not one of"),
        (("id: rope", "id: rope2"), r"id: 'rope2' does not match the file name 'rope'"),
        (("      x: {normal: {shape: [2, 3, 8, 16], seed: 1}}",
          "      x: {normal: {shape: [2, 3, 8, 16], seed: 1}}\n      y: {value: [1]}"),
         r"cases\[3\] \(half_default_positions\)\.inputs\.y: unknown input 'y' \(declared: positions, x\)"),
        (("title:", "title: a\ntitle:"), r"line \d+: duplicate key 'title'"),
        (("- name: rope_composition", "- name: rope_composition\n  - name: rope_composition"),
         r"properties: declared twice"),
        (("  - name: half_default_positions\n    params: {}\n    inputs:\n      x: {normal: "
          "{shape: [2, 3, 8, 16], seed: 1}}",
          "  - name: half_default_positions\n    params: {}\n    inputs: {}"),
         r"cases\[3\] \(half_default_positions\)\.inputs: required input 'x' is missing"),
        (("rotary_dim:\n    type:", "rotary_dim:\n    typ: x\n    type:"),
         r"parameters\.rotary_dim: Additional properties are not allowed"),
        (("formula: |", "formula: [1\nfoo: |"), r"not valid YAML"),
        # a typo inside a nested dict: the NumPy reference would ignore it, a golden bake it in
        (("{scaling: {type: linear, factor: 4.0}}", "{scaling: {type: linear, facter: 4.0}}"),
         r"rope\.yaml: cases\[\d+\] \(linear_scaling\)\.params\.scaling: scaling has key "
         r"'facter', which rope_type='linear' does not use"),
        (("{scaling: {type: linear, factor: 4.0}}", "{scaling: {type: linear, factor: 0.5}}"),
         r"cases\[\d+\] \(linear_scaling\)\.params\.scaling: scaling\['factor'\]=0\.5 must "
         r"be >= 1"),
        (("{scaling: {type: linear, factor: 4.0}}", "{scaling: {type: lineer, factor: 4.0}}"),
         r"cases\[\d+\] \(linear_scaling\)\.params\.scaling: scaling\['rope_type'\]='lineer'"),
    ],
)
def test_invalid_specs_name_file_key_path_and_reason(tmp_path: Path, edit, expected) -> None:
    old, new = edit
    text = _rope_text()
    assert old in text, f"test edit no longer applies: {old!r}"
    path = _write(tmp_path, "rope", text.replace(old, new, 1))
    with pytest.raises(SpecError, match=expected) as info:
        load_spec_file(path)
    assert str(path) in str(info.value)


def test_default_must_satisfy_its_declaration(tmp_path: Path) -> None:
    text = _rope_text().replace("    default: 10000.0\n    doc: rope_theta",
                                "    default: 0.5\n    doc: rope_theta")
    with pytest.raises(SpecError, match=r"parameters\.base\.default: parameter base=0\.5"):
        load_spec_file(_write(tmp_path, "rope", text))


def test_unknown_property_is_reported_with_its_path(tmp_specs: Path) -> None:
    from posenc.conformance.runner import Options, Runner

    path = tmp_specs / "rope.yaml"
    path.write_text(path.read_text().replace("- name: rope_composition", "- name: rope_compose"))
    with pytest.raises(SpecError, match=r"rope\.yaml: properties\[\d\]\.name: unknown property "
                                        r"'rope_compose'"):
        Runner(Options(backends=["numpy"], encodings=["rope"]))


def test_a_typo_in_a_property_s_nested_dict_fails_the_spec(tmp_path: Path) -> None:
    text = _rope_text()
    old = "  - name: rope_linear_interpolation\n"
    assert old in text
    text = text.replace(old, old + "    params: {scaling: {type: linear, factr: 2.0}}\n", 1)
    with pytest.raises(SpecError, match=r"properties\[\d+\]\.params\.scaling: scaling has key "
                                        r"'factr'"):
        load_spec_file(_write(tmp_path, "rope", text))


def test_a_mapping_parameter_without_a_checker_fails_the_spec(tmp_path: Path) -> None:
    text = _rope_text().replace("  scaling:\n    type: [object, \"null\"]",
                                "  scaling:\n    type: [object, \"null\"]", 1)
    text = text.replace("\ncases:\n", "\n  extra:\n    type: [object, \"null\"]\n    default: null\n"
                        "    doc: an unchecked mapping\ncases:\n", 1)
    with pytest.raises(SpecError, match=r"parameters\.extra: a mapping-valued parameter needs a "
                                        r"checker"):
        load_spec_file(_write(tmp_path, "rope", text))


def _scribble(spec: Any) -> None:
    """Change every kind of dict and list a spec holds, as a careless caller might."""
    spec.data["title"] = "scribbled"
    spec.data["cases"].clear()
    spec.parameters["base"]["default"] = -1.0
    spec.cases[0].params["layout"] = "scribbled"
    spec.cases[0].inputs.clear()
    spec.tolerances["scribbled"] = {}
    spec.properties[0].params["scribbled"] = 1
    spec.diagnoses[0].params["scribbled"] = 1


def test_a_caller_changing_its_spec_changes_no_one_else_s(tmp_path: Path) -> None:
    """load_spec and load_all hand out copies of the cached spec: a caller writing into one
    leaves the next caller's (and the cache's) intact."""
    from posenc.specs import load_all, load_spec

    (tmp_path / "rope.yaml").write_text(_rope_text())
    pristine = load_spec_file(tmp_path / "rope.yaml")
    assert pristine.cases[0].params.get("layout") != "scribbled" and pristine.diagnoses

    _scribble(load_spec("rope", tmp_path))
    _scribble(load_all(tmp_path)["rope"])
    for _, spec in load_all(tmp_path).items():
        _scribble(spec)
    for again in (load_spec("rope", tmp_path), load_all(tmp_path)["rope"]):
        assert again == pristine  # dataclass equality: every field, nested dicts included


def test_specs_are_parsed_once_per_file_version(tmp_path: Path, monkeypatch: Any) -> None:
    """The copies come from a cache: a second load reads no YAML; an edited file is read again."""
    import posenc.specs as specs_module

    path = tmp_path / "rope.yaml"
    path.write_text(_rope_text())
    reads: list[Path] = []
    real = specs_module.load_spec_file
    monkeypatch.setattr(specs_module, "load_spec_file", lambda p: reads.append(p) or real(p))
    first = specs_module.load_spec("rope", tmp_path)
    assert specs_module.load_all(tmp_path)["rope"] == first and len(reads) == 1
    path.write_text(_rope_text().replace("title:", "title: edited", 1))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert specs_module.load_spec("rope", tmp_path).title.startswith("edited")
    assert len(reads) == 2
    assert "rope" in specs_module.load_all(tmp_path) and len(reads) == 2
