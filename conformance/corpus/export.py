"""``posenc export``: the golden cases as a versioned, schema-described test-vector corpus that
any language reads (the format: :mod:`posenc.corpus`; one encoding: :mod:`.corpus_vectors`;
the line manifest: :mod:`.corpus_manifest`)."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from posenc.errors import ParameterError

DTYPES = ("float64", "float32", "bfloat16", "float16")
FORMULA = (
    "Elementwise, allowed = atol*scale + rtol*|expected| + log_rtol*|expected|*|ln|expected|| "
    "(that term 0 where expected is 0) + angle*angle_eps*angle_bound*scale, with scale and "
    "angle_bound from the vector and atol, rtol, log_rtol, angle, angle_eps from "
    "tolerances[result dtype][profile] of its encoding; an element passes when |actual - "
    "expected| <= allowed (the error of NaN against NaN, or of equal infinities, is 0; an "
    "infinite expected value must be met exactly). An encoding whose output_kind is 'int' is "
    "compared exactly. A profile whose allowed error reaches a tenth of the vector's largest "
    "|expected| judges nothing there (posenc reports it 'not judgeable', never a pass).")


@dataclass
class Summary:
    root: Path
    encodings: int
    vectors: int
    arrays: int
    bytes: int


def select(encodings: Iterable[str] | None, models: Iterable[str] | None) -> dict[str, list[str]]:
    """Encoding -> the names of its selected golden cases (every case, or a named model's)."""
    from posenc import catalog

    from .. import named

    specs = catalog.specs()
    models = list(models or [])
    chosen = list(encodings) if encodings else (sorted(named.MATCHERS) if models else list(specs))
    unknown = [e for e in chosen if e not in specs]
    if unknown:
        raise ParameterError(f"--encoding {unknown[0]!r} is not an encoding (known: "
                             f"{', '.join(sorted(specs))})")
    out: dict[str, list[str]] = {}
    for encoding in chosen:
        spec = specs[encoding]
        if not models:
            out[encoding] = [c.name for c in spec.cases]
            continue
        if encoding not in named.MATCHERS:
            raise ParameterError(f"--encoding {encoding!r} has no named-model cases (--model "
                                 f"selects in: {', '.join(sorted(named.MATCHERS))})")
        keep = {c for m in models for c in named.cases(spec, m)}
        if keep:
            out[encoding] = [c.name for c in spec.cases if c.name in keep]
    if not out:
        raise ParameterError(f"--model {', '.join(models)}: no golden case of "
                             f"{', '.join(chosen)} computes this configuration")
    return out


def _prepare(out: Path) -> None:
    """An empty folder, or an earlier corpus (replaced); anything else is refused."""
    from posenc.corpus import INDEX

    if out.exists() and not out.is_dir():
        raise ParameterError(f"--out {str(out)!r} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not (out / INDEX).is_file():
            raise ParameterError(f"--out {str(out)!r} is a non-empty folder without {INDEX}; "
                                 f"refusing to write a corpus into it")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


def export(out: str | Path, *, encodings: Iterable[str] | None = None,
           models: Iterable[str] | None = None, dtypes: Iterable[str] | None = None,
           with_planted: bool = False) -> Summary:
    """Write the corpus of the selected golden cases into ``out`` (see :mod:`posenc.corpus`)."""
    from posenc import __version__, catalog, golden, paths
    from posenc.corpus import CORPUS_VERSION, INDEX, SCHEMA, schema

    from .manifest import manifest
    from .vectors import document, dump

    dtype_list = list(dtypes) if dtypes else list(DTYPES)
    bad = [d for d in dtype_list if d not in DTYPES]
    if bad:
        raise ParameterError(f"--dtype {bad[0]!r} is not a result dtype (known: "
                             f"{', '.join(DTYPES)})")
    selected = select(encodings, models)
    root = Path(out)
    _prepare(root)
    hashes = golden.read_manifest(paths.golden_dir())["encodings"]
    entries, vectors = [], 0
    for encoding, names in selected.items():
        spec = catalog.specs()[encoding]
        loaded = golden.load(spec)
        doc = document(spec, [loaded.cases[n] for n in names], root, dtype_list,
                       planted=with_planted, hashes=hashes[encoding], version=__version__)
        dump(doc, root / f"{encoding}.json")
        (root / f"{encoding}.manifest").write_text(manifest(doc), encoding="utf-8")
        entries.append({"encoding": encoding, "file": f"{encoding}.json",
                        "manifest": f"{encoding}.manifest", "vectors": len(doc["vectors"])})
        vectors += len(doc["vectors"])
    index = {"corpus_version": CORPUS_VERSION, "kind": "index", "posenc_version": __version__,
             "schema": SCHEMA, "tolerance_formula": FORMULA, "encodings": entries,
             "filters": {"encodings": list(encodings) if encodings else None,
                         "models": list(models) if models else None, "dtypes": dtype_list,
                         "with_planted": with_planted}}
    dump(index, root / INDEX)
    (root / SCHEMA).write_text(json.dumps(schema(), indent=1) + "\n", encoding="utf-8")
    arrays = [p for p in (root / "arrays").rglob("*.bin")]
    return Summary(root, len(entries), vectors, len(arrays), sum(p.stat().st_size for p in arrays))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--out", default="corpus", metavar="DIR",
                   help="the corpus folder (default: corpus); an earlier corpus there is "
                        "replaced, any other non-empty folder refused")
    p.add_argument("--encoding", action="append", metavar="ID",
                   help="export this encoding only (repeatable; default: every one)")
    p.add_argument("--model", "--named", action="append", dest="model", metavar="MODEL",
                   help="only the golden cases of a named model's published configuration, "
                        "e.g. llama-3.1-8b (repeatable; rope and ggml_rope have them)")
    p.add_argument("--dtype", action="append", choices=DTYPES,
                   help="the result dtypes whose tolerances are exported and whose exact "
                        "tolerance decides the flags (repeatable; default: all four)")
    p.add_argument("--with-planted", action="store_true",
                   help="also write each flagged diagnosis's output (the planted bug) as an "
                        "array, so a consumer can name the bug its output matches")


def main(args: argparse.Namespace) -> int:
    summary = export(args.out, encodings=args.encoding, models=args.model, dtypes=args.dtype,
                     with_planted=args.with_planted)
    print(f"wrote {summary.root}: {summary.encodings} encoding(s), {summary.vectors} vector(s), "
          f"{summary.arrays} array file(s), {summary.bytes / 1e6:.2f} MB", file=sys.stderr)
    return 0
