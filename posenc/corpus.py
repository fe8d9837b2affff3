"""The test-vector corpus (``posenc export``): its format version, its JSON Schema and a reader.

A corpus is a folder: ``corpus.json`` (the index: version, posenc version, one entry per
encoding), ``schema.json`` (the JSON Schema of every JSON file in it), ``<encoding>.json`` (the
encoding's tolerances, declared diagnoses and vectors) and ``arrays/`` (raw little-endian
arrays, each referenced by path, dtype, shape, byte length and sha256), plus
``<encoding>.manifest``, the same vectors as whitespace-separated lines for readers without
a JSON parser (``examples/c/``).

``corpus_version`` is ``MAJOR.MINOR``: a minor version only adds fields, so a reader of 1.x
reads any 1.y (ignoring what it does not know); a new major version may change or remove
fields, and a reader refuses it. :func:`read` reads a corpus back into golden cases, bit for
bit, and raises :class:`CorpusError` naming the file and the field of any problem.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from .errors import PosencError
from .golden import GoldenCase

CORPUS_VERSION = "1.0"
INDEX = "corpus.json"
SCHEMA = "schema.json"
SCHEMA_FILE = Path(__file__).with_name("corpus_schema.json")
# array dtypes as named in the corpus -> NumPy's little-endian spelling
DTYPES = {"float64": "<f8", "int64": "<i8", "bool": "|b1", "complex128": "<c16"}


class CorpusError(PosencError):
    """A corpus file is missing, malformed, of an unknown version or disagrees with an array."""


@cache
def schema() -> dict[str, Any]:
    """The JSON Schema of this posenc's corpus files (shipped as package data)."""
    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


def major(version: str) -> int:
    """The major number of a ``MAJOR.MINOR`` version string (ValueError otherwise)."""
    head, _, minor = version.partition(".")
    if not (head.isdigit() and minor.isdigit()):
        raise ValueError(version)
    return int(head)


def check_version(value: Any, where: str, field: str = "corpus_version") -> None:
    """Refuse a corpus (or schema) version whose major this reader does not know."""
    try:
        ok = major(value) == major(CORPUS_VERSION)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise CorpusError(f"{where}: {field}: {value!r} is not a corpus version this reader "
                          f"knows (posenc reads {major(CORPUS_VERSION)}.x; minor versions only "
                          f"add fields)")


def _load_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise CorpusError(f"{path}: the file does not exist")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorpusError(f"{path}: not readable JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CorpusError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data


def _validate(data: dict[str, Any], path: Path) -> None:
    import jsonschema

    check_version(data.get("corpus_version"), str(path))
    errors = sorted(jsonschema.Draft202012Validator(schema()).iter_errors(data),
                    key=lambda e: list(e.absolute_path))
    if errors:
        error = errors[0]
        field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}"
                        for p in error.absolute_path).lstrip(".") or "(top level)"
        raise CorpusError(f"{path}: {field}: {error.message}")


def read_array(root: Path, record: dict[str, Any], where: str) -> np.ndarray:
    """One array of the corpus, checked against its record (``where`` names the JSON field)."""
    path = root / record["path"]
    if not path.is_file():
        raise CorpusError(f"{where}.path: the array file {path} does not exist")
    data = path.read_bytes()
    dtype = np.dtype(DTYPES[record["dtype"]])
    shape = tuple(record["shape"])
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if record["byte_length"] != expected:
        raise CorpusError(f"{where}.byte_length: {record['byte_length']} does not fit shape "
                          f"{list(shape)} of {record['dtype']} ({expected} bytes)")
    if len(data) != expected:
        raise CorpusError(f"{where}.byte_length: {path} has {len(data)} bytes, the corpus says "
                          f"{expected}")
    digest = hashlib.sha256(data).hexdigest()
    if digest != record["sha256"]:
        raise CorpusError(f"{where}.sha256: {path} hashes to {digest}, the corpus says "
                          f"{record['sha256']}")
    return np.frombuffer(data, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))


def _vector(root: Path, vector: dict[str, Any], where: str) -> GoldenCase:
    arrays: dict[str, np.ndarray | None] = {}
    for k, entry in enumerate(vector["inputs"]):
        record = entry["array"]
        arrays[entry["name"]] = (None if record is None else
                                 read_array(root, record, f"{where}.inputs[{k}].array"))
    output = read_array(root, vector["output"], f"{where}.output")
    return GoldenCase(vector["name"], dict(vector["params"]), arrays, output,
                      float(vector["angle_bound"]))


def read_encoding(root: Path, file: str) -> dict[str, GoldenCase]:
    """The vectors of one ``<encoding>.json``, as golden cases, by case name."""
    path = root / file
    data = _load_json(path)
    _validate(data, path)
    return {v["name"]: _vector(root, v, f"{path}: vectors[{i}]")
            for i, v in enumerate(data["vectors"])}


def read(root: str | Path, encodings: Iterable[str] | None = None
         ) -> dict[str, dict[str, GoldenCase]]:
    """A corpus read back: encoding -> case name -> :class:`~posenc.golden.GoldenCase` (inputs,
    output and angle bound exactly as exported). ``encodings`` selects some (default: all)."""
    root = Path(root)
    index_path = root / INDEX
    index = _load_json(index_path)
    _validate(index, index_path)
    schema_path = root / SCHEMA
    check_version(_load_json(schema_path).get("corpus_version"), str(schema_path))
    listed = {e["encoding"]: e["file"] for e in index["encodings"]}
    wanted = list(listed) if encodings is None else list(encodings)
    unknown = [e for e in wanted if e not in listed]
    if unknown:
        raise CorpusError(f"{index_path}: encodings: {', '.join(map(repr, unknown))} not in the "
                          f"corpus (it has: {', '.join(listed) or 'none'})")
    return {e: read_encoding(root, listed[e]) for e in wanted}
