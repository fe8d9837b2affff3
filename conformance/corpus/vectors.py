"""One encoding of the corpus as a JSON document (``posenc export``): its tolerances per result
dtype and precision profile, and each golden case as a vector whose arrays are written as raw
little-endian files, with the declared diagnoses the case tells from the right answer (flags).

A flag is what the harness's diagnoser needs to name a bug (:mod:`.diagnose`): the diagnosis's
output fails the golden under the exact profile's tolerance of a result dtype (for an integer
output, differs from it at all). With ``planted``, the diagnosis's output is written too, so a
consumer can say which bug its output matches without posenc.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from posenc.golden import GoldenCase
from posenc.specs import Spec, resolve_params

from ..case_scale import case_scale
from ..diagnose import Diagnoser
from ..tolerances import PROFILES, Tolerance, compare, for_spec

NAMES = {"<f8": "float64", "<i8": "int64", "|b1": "bool", "<c16": "complex128"}


def write_array(root: Path, rel: str, array: np.ndarray) -> dict[str, Any]:
    """Write ``array`` as raw little-endian bytes at ``root/rel``; its record in the corpus."""
    wide = np.asarray(array)
    little = wide.dtype.newbyteorder("<") if wide.dtype.byteorder not in "|" else wide.dtype
    name = NAMES.get(little.str)
    if name is None:
        raise ValueError(f"array {rel}: dtype {wide.dtype} has no corpus name "
                         f"(known: {', '.join(NAMES.values())})")
    data = np.ascontiguousarray(wide, dtype=little).tobytes()
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"path": rel, "dtype": name, "shape": list(wide.shape), "byte_length": len(data),
            "sha256": hashlib.sha256(data).hexdigest()}


def tolerance_record(tol: Tolerance) -> dict[str, Any]:
    return {"atol": tol.atol, "rtol": tol.rtol, "angle": tol.angle, "angle_eps": tol.compute_eps,
            "log_rtol": tol.log_rtol, "reason": tol.reason}


def tolerances(spec: Spec, dtypes: list[str]) -> dict[str, dict[str, Any]]:
    """Result dtype -> profile -> the tolerance the harness applies (conformance/tolerances.py)."""
    return {dtype: {profile: tolerance_record(for_spec(spec, dtype, profile))
                    for profile in PROFILES} for dtype in dtypes}


def _number(value: float) -> float | str:
    """A JSON number, or the string 'inf' / 'nan' (JSON has no literal for them)."""
    return value if math.isfinite(value) else str(value)


def flags(spec: Spec, case: GoldenCase, dtypes: list[str], scale: float,
          diagnoser: Diagnoser) -> list[tuple[str, list[str], float, np.ndarray]]:
    """(diagnosis, dtypes it is distinguishable in, max |planted - golden|, planted output) of
    every declared diagnosis the case tells from the golden under the exact profile."""
    out = []
    for diagnosis in spec.diagnoses:
        planted = diagnoser.output(spec, case, diagnosis)
        if planted is None:
            continue
        if spec.output_kind == "int":
            seen = [] if np.array_equal(planted, case.output) else list(dtypes)
        else:
            seen = [d for d in dtypes if not compare(
                planted, case.output, for_spec(spec, d), scale=scale,
                angle_bound=case.angle_bound).ok]
        if seen:
            with np.errstate(invalid="ignore"):
                gap = np.abs(planted.astype(case.output.dtype) - case.output)
            worst = float(np.nanmax(gap, initial=0.0)) if gap.size else 0.0
            if np.isnan(gap).any() and not np.array_equal(np.isnan(planted), np.isnan(case.output)):
                worst = math.inf
            out.append((diagnosis.name, seen, worst, planted))
    return out


def vector(spec: Spec, case: GoldenCase, root: Path, dtypes: list[str], *, planted: bool,
           diagnoser: Diagnoser) -> dict[str, Any]:
    """The JSON record of one golden case, its arrays written under ``root/arrays``."""
    base = f"arrays/{spec.id}/{case.name}"
    scale = case_scale(spec, case) if spec.output_kind != "int" else 1.0
    inputs = [{"name": name, "array": None if value is None
               else write_array(root, f"{base}/in.{name}.bin", value)}
              for name, value in case.inputs.items()]
    record: dict[str, Any] = {
        "name": case.name, "params": case.params,
        "resolved_params": resolve_params(spec, case.params), "scale": scale,
        "angle_bound": case.angle_bound, "inputs": inputs,
        "output": write_array(root, f"{base}/out.bin", case.output), "flags": []}
    for name, seen, worst, out in flags(spec, case, dtypes, scale, diagnoser):
        flag: dict[str, Any] = {"diagnosis": name, "distinguishable_in": seen,
                                "max_abs": _number(worst)}
        if planted:
            flag["planted"] = write_array(root, f"{base}/planted.{name}.bin", out)
        record["flags"].append(flag)
    return record


def document(spec: Spec, cases: list[GoldenCase], root: Path, dtypes: list[str], *,
             planted: bool, hashes: dict[str, str], version: str) -> dict[str, Any]:
    """The ``<encoding>.json`` document of ``spec``'s selected ``cases``."""
    from posenc.corpus import CORPUS_VERSION

    diagnoser = Diagnoser()
    return {
        "corpus_version": CORPUS_VERSION, "kind": "encoding", "posenc_version": version,
        "encoding": spec.id, "title": spec.title, "function": spec.function,
        "family": spec.family, "output_kind": spec.output_kind,
        "spec_hash": hashes["spec_hash"], "reference_hash": hashes["reference_hash"],
        "defaults": spec.defaults(),
        "inputs": [{"name": d.name, "kind": d.kind, "shape": d.shape, "optional": d.optional}
                   for d in spec.inputs],
        "tolerances": tolerances(spec, dtypes),
        "diagnoses": [{"name": d.name, "title": d.title, "explanation": d.explanation}
                      for d in spec.diagnoses],
        "vectors": [vector(spec, case, root, dtypes, planted=planted, diagnoser=diagnoser)
                    for case in cases]}


def dump(data: dict[str, Any], path: Path) -> None:
    """Strict JSON (no NaN or Infinity literals), sorted keys, one trailing newline."""
    path.write_text(json.dumps(data, indent=1, sort_keys=True, allow_nan=False) + "\n",
                    encoding="utf-8")
