"""Golden lifecycle: generate goldens from the NumPy references, write them reproducibly, check them.

``golden/<id>.npz`` holds, for each case of ``spec/<id>.yaml``, its inputs (``<case>/in/<name>``)
and the reference output (``<case>/out``) in float64/int64/bool (complex128 for complex
outputs), without pickles. A reference returning a tuple of same-shape arrays (e.g. a
(real, imag) pair) is stored stacked along a new leading axis, which is how the harness
compares a backend's tuple too (:func:`output_array`).
``golden/manifest.json`` records, per encoding, the canonical hash of the spec content, the hash
of the reference source, the file's sha256 and per-case metadata. A golden is *stale* when
either hash changed, *corrupt* when the file does not match its sha256 or cannot be read,
*drifted* when it differs numerically from an in-memory regeneration.
"""

from __future__ import annotations

import hashlib
import inspect
import io
import json
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from . import catalog, inputs
from .errors import GoldenError, SpecError
from .paths import golden_dir
from .rotary import schedules
from .specs import Case, Spec, resolve_params

FORMAT = 1
MANIFEST = "manifest.json"
DRIFT_RTOL = 1e-13  # libm differences across platforms stay far below this
DRIFT_ATOL = 1e-13


@dataclass
class GoldenCase:
    name: str
    params: dict[str, Any]
    inputs: dict[str, np.ndarray | None]  # in declared order; None for an omitted optional input
    output: np.ndarray
    angle_bound: float = 0.0


@dataclass
class Golden:
    spec: Spec
    cases: dict[str, GoldenCase] = field(default_factory=dict)


def output_array(value: Any) -> np.ndarray:
    """An encoding's output as one float64 (or complex128) array: tuples of one shape stacked
    on axis 0, tuples of several shapes (an array and a scalar factor) flattened end to end."""
    if isinstance(value, tuple | list):
        parts = [output_array(v) for v in value]
        if len({p.shape for p in parts}) > 1:
            return np.concatenate([p.ravel() for p in parts])
        return np.stack(parts)
    array = np.asarray(value)
    return array.astype(np.complex128 if np.iscomplexobj(array) else np.float64)


# NumPy float64 reference code kept outside posenc/reference/ because the diagnoses and the
# tests share it: a reference that imports from one of these is hashed with it
REFERENCE_HELPERS: tuple[ModuleType, ...] = (schedules,)


def reference_hash(spec: Spec) -> str:
    """Hash of everything that determines the golden numbers besides the spec: the reference
    module, the input generators and the reference helpers whose names it imports."""
    module = catalog.reference_module(spec)
    parts = [f"format={FORMAT}", inspect.getsource(module), inspect.getsource(inputs)]
    used = {getattr(value, "__module__", None) for value in vars(module).values()}
    used |= {value.__name__ for value in vars(module).values() if isinstance(value, ModuleType)}
    parts += [Path(helper.__file__).read_text() for helper in REFERENCE_HELPERS
              if helper.__name__ in used]
    return hashlib.sha256("\n\0".join(parts).encode()).hexdigest()


def compute_case(spec: Spec, case: Case) -> GoldenCase:
    """Run the reference on one case, in memory."""
    ref = catalog.reference_function(spec)
    arrays: dict[str, np.ndarray | None] = {}
    for decl in spec.inputs:
        gen = case.inputs.get(decl.name)
        where = f"{spec.path}: cases.{case.name}.inputs.{decl.name}"
        arrays[decl.name] = None if gen is None else inputs.generate(gen, decl.kind, where)
    params = resolve_params(spec, case.params)
    try:
        output = output_array(ref(*arrays.values(), **params))
        bound = 0.0
        if spec.trigonometric:
            angle_bound = catalog.reference_module(spec).angle_bound
            bound = float(angle_bound(*arrays.values(), **params))
    except Exception as exc:
        raise SpecError(f"{spec.path}: case {case.name!r}: the reference failed: {exc}") from exc
    return GoldenCase(case.name, dict(case.params), arrays, output, bound)


def compute(spec: Spec) -> Golden:
    golden = Golden(spec)
    for case in spec.cases:
        golden.cases[case.name] = compute_case(spec, case)
    return golden


def _arrays(golden: Golden) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for case in golden.cases.values():
        for name, value in case.inputs.items():
            if value is not None:
                out[f"{case.name}/in/{name}"] = value
        out[f"{case.name}/out"] = case.output
    return out


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """A .npz archive whose bytes depend only on the arrays (fixed timestamps and order)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(arrays):
            member = io.BytesIO()
            np.lib.format.write_array(member, np.ascontiguousarray(arrays[name]),
                                      allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, member.getvalue())
    return buffer.getvalue()


def read_manifest(directory: Path) -> dict[str, Any]:
    path = directory / MANIFEST
    if not path.exists():
        return {"format": FORMAT, "encodings": {}}
    try:
        data = json.loads(path.read_text())
        if not isinstance(data.get("encodings"), dict) or data.get("format") != FORMAT:
            raise ValueError(f"expected format {FORMAT} with an 'encodings' mapping")
    except (OSError, ValueError) as exc:
        raise GoldenError(f"{path}: corrupt manifest: {exc}") from exc
    return data


def write_manifest(directory: Path, manifest: dict[str, Any]) -> None:
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    (directory / MANIFEST).write_text(text)


def _entry(golden: Golden, blob: bytes) -> dict[str, Any]:
    return {
        "file": f"{golden.spec.id}.npz",
        "sha256": hashlib.sha256(blob).hexdigest(),
        "spec_hash": golden.spec.content_hash(),
        "reference_hash": reference_hash(golden.spec),
        "cases": {c.name: {"angle_bound": c.angle_bound} for c in golden.cases.values()},
    }


def _is_current(spec: Spec, entry: dict[str, Any] | None, directory: Path) -> bool:
    return (entry is not None and (directory / entry["file"]).exists()
            and entry["spec_hash"] == spec.content_hash()
            and entry["reference_hash"] == reference_hash(spec))


def regen(ids: Iterable[str] = (), *, everything: bool = False,
          directory: Path | None = None) -> list[tuple[str, str]]:
    """Rewrite goldens whose spec or reference changed (``ids`` restricts, ``everything`` forces).

    Returns ``(id, action)`` pairs: 'written', 'unchanged' or 'removed' (orphans, only when no
    ids are given). Files of untouched encodings are left byte-identical.
    """
    directory = directory or golden_dir()
    directory.mkdir(parents=True, exist_ok=True)
    manifest = read_manifest(directory)
    entries = manifest["encodings"]
    specs = catalog.specs()
    ids = list(ids)
    for spec_id in ids:
        if spec_id not in specs:
            raise SpecError(f"no spec {spec_id!r} (known: {', '.join(specs)})")
    actions = []
    for spec_id in ids or list(specs):
        spec = specs[spec_id]
        if not everything and not ids and _is_current(spec, entries.get(spec_id), directory):
            actions.append((spec_id, "unchanged"))
            continue
        golden = compute(spec)
        blob = npz_bytes(_arrays(golden))
        (directory / f"{spec_id}.npz").write_bytes(blob)
        entries[spec_id] = _entry(golden, blob)
        actions.append((spec_id, "written"))
    if not ids:
        for spec_id in sorted(set(entries) - set(specs)):
            (directory / entries.pop(spec_id)["file"]).unlink(missing_ok=True)
            actions.append((spec_id, "removed"))
        known = {f"{s}.npz" for s in specs}
        for stray in sorted(directory.glob("*.npz")):
            if stray.name not in known:
                stray.unlink()
                actions.append((stray.stem, "removed"))
    write_manifest(directory, manifest)
    return actions


def read_npz(path: Path, sha256: str) -> dict[str, np.ndarray]:
    try:
        blob = path.read_bytes()
    except OSError as exc:
        raise GoldenError(f"{path}: missing golden file ({exc.strerror})") from exc
    if hashlib.sha256(blob).hexdigest() != sha256:
        raise GoldenError(
            f"{path}: corrupt golden: its sha256 does not match golden/manifest.json "
            "(edited by hand or truncated? run `posenc golden regen`)")
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except Exception as exc:
        raise GoldenError(f"{path}: corrupt golden: cannot read it as .npz: {exc}") from exc


def load(spec: Spec, directory: Path | None = None) -> Golden:
    """The stored golden of ``spec``, verified against the manifest (corrupt files raise)."""
    directory = directory or golden_dir()
    entry = read_manifest(directory)["encodings"].get(spec.id)
    if entry is None:
        raise GoldenError(f"{spec.id}: no golden in {directory} (run `posenc golden regen {spec.id}`)")
    arrays = read_npz(directory / entry["file"], entry["sha256"])
    golden = Golden(spec)
    for case in spec.cases:
        meta = entry["cases"].get(case.name)
        if meta is None or f"{case.name}/out" not in arrays:
            raise GoldenError(f"{spec.id}: golden has no case {case.name!r} (stale: regenerate)")
        ins = {d.name: arrays.get(f"{case.name}/in/{d.name}") for d in spec.inputs}
        golden.cases[case.name] = GoldenCase(case.name, dict(case.params), ins,
                                             arrays[f"{case.name}/out"], meta["angle_bound"])
    return golden


@dataclass
class Problem:
    encoding: str
    kind: str  # missing | orphaned | stale | corrupt | drifted
    detail: str

    def __str__(self) -> str:
        return f"{self.encoding}: {self.kind}: {self.detail}"


def compare_arrays(name: str, stored: np.ndarray | None, fresh: np.ndarray | None) -> str | None:
    if stored is None or fresh is None:
        return None if stored is fresh else f"{name}: present in only one of stored/regenerated"
    if stored.shape != fresh.shape:
        return f"{name}: shape {stored.shape} != regenerated {fresh.shape}"
    if stored.dtype != fresh.dtype:
        return f"{name}: dtype {stored.dtype} != regenerated {fresh.dtype}"
    if not np.allclose(stored, fresh, rtol=DRIFT_RTOL, atol=DRIFT_ATOL, equal_nan=True):
        err = np.abs(stored - fresh)
        worst = np.unravel_index(np.nanargmax(err), err.shape)
        return f"{name}: max abs difference {np.nanmax(err):.3e} at index {tuple(map(int, worst))}"
    return None


def check(directory: Path | None = None, ids: Iterable[str] = ()) -> list[Problem]:
    """Every way the goldens disagree with the specs and references (empty when all is well)."""
    directory = directory or golden_dir()
    problems: list[Problem] = []
    try:
        manifest = read_manifest(directory)
    except GoldenError as exc:
        return [Problem("manifest", "corrupt", str(exc))]
    entries = manifest["encodings"]
    specs = catalog.specs()
    wanted = list(ids) or list(specs)
    if not ids:
        for orphan in sorted(set(entries) - set(specs)):
            problems.append(Problem(orphan, "orphaned", "golden entry without a spec file"))
        for stray in sorted(directory.glob("*.npz")):
            if stray.stem not in specs:
                problems.append(Problem(stray.stem, "orphaned", f"{stray.name} has no spec"))
    for spec_id in wanted:
        spec = specs[spec_id]
        entry = entries.get(spec_id)
        if entry is None or not (directory / entry["file"]).exists():
            problems.append(Problem(spec_id, "missing", "no golden: run `posenc golden regen`"))
            continue
        if entry["spec_hash"] != spec.content_hash():
            problems.append(Problem(spec_id, "stale", "the spec changed since the golden was made"))
        if entry["reference_hash"] != reference_hash(spec):
            problems.append(Problem(spec_id, "stale", "the reference (or input generators) changed"))
        try:
            stored = load(spec, directory)
        except GoldenError as exc:
            kind = "stale" if "stale" in str(exc) else "corrupt"
            problems.append(Problem(spec_id, kind, str(exc)))
            continue
        fresh = compute(spec)
        for name, case in fresh.cases.items():
            old = stored.cases[name]
            for label, a, b in [(f"{name}/out", old.output, case.output),
                                *((f"{name}/in/{k}", old.inputs[k], v)
                                  for k, v in case.inputs.items())]:
                diff = compare_arrays(label, a, b)
                if diff:
                    problems.append(Problem(spec_id, "drifted", diff))
            if abs(old.angle_bound - case.angle_bound) > 1e-9 * max(1.0, case.angle_bound):
                problems.append(Problem(spec_id, "drifted", f"{name}: angle_bound changed"))
    return problems
