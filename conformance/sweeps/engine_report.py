"""One engine's sweep: its verdict per family, the float64 grading of a rotation the engine
computed, the forked run of one family and the report file that ``posenc sweep
--from-reports`` merges.

The truth is posenc's float64 reading of the family's config
(:func:`posenc.conformance.sweeps.transformers_reading.expected_layers`, rotated by
:func:`~posenc.conformance.sweeps.transformers_reading.rotate`): where the transformers sweep finds the
family's module conforming, that is transformers' rotation within its profile; where it does
not, posenc's function. The pairing is held to the one the transformers sweep found for the
family (the engines load the same weights), when its report is given.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from posenc.errors import PosencError

from .transformers_observation import run_forked  # noqa: F401 - the engine sweeps take it from here
from .transformers_reading import LAYOUTS, Finding, LayerRope, best_pairing, grade, rotate

VERDICTS = ("conforms", "diverges", "not supported", "not checkable")
REPORT = "sweep-{}.json"  # an engine's report in a --from-reports folder


@dataclass
class EngineRow:
    """An engine's verdict on one family (a transformers model folder)."""

    family: str
    verdict: str  # one of VERDICTS
    model_type: str = ""
    architecture: str = ""  # the engine's code that handled it (mlx_lm.models.llama)
    profile: str | None = None
    max_abs: float = 0.0
    pairing: str = ""
    reason: str = ""
    adjudication: str = ""  # a settled divergence: engine bug / convention / posenc gap
    # the verdict given the config.json transformers' save_pretrained writes (rope_theta only
    # inside rope_parameters): "" not tried, "conforms", "diverges: ...", "does not load: ..."
    saved_config: str = ""
    received: str = ""  # what the engine's rope was given (vLLM: its get_rope calls)
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["findings"] = [f.__dict__ for f in self.findings]
        out["max_abs"] = float(self.max_abs) if np.isfinite(self.max_abs) else None
        out["seconds"] = round(self.seconds, 3)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EngineRow:
        values = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        values["findings"] = [Finding(**f) for f in data.get("findings", [])]
        values["max_abs"] = float("inf") if data.get("max_abs") is None else data["max_abs"]
        return cls(**values)


# -- grading ---------------------------------------------------------------------------------------
def fit(x: np.ndarray, y: np.ndarray, positions: np.ndarray, layer: LayerRope,
        pairings: tuple[str, ...] = LAYOUTS) -> tuple[str | None, float, str, bool]:
    """``(tightest profile, max abs error, pairing, judgeable)`` of the pairing among
    ``pairings`` that fits the engine's ``y = rope(x)`` best (x, y [b, h, s, d] float32 values
    as float64, positions [b, s]); not judgeable: float32 cannot resolve angles this large
    under any profile."""
    scale = max(float(np.max(np.abs(x))), 1e-30)
    return best_pairing(x, y, positions, layer, pairings, scale=scale,
                        angle_bound=float(np.max(np.abs(positions))))


def _variants(layer: LayerRope, width: int,
              bases: tuple[float, ...] = ()) -> list[tuple[str, str, LayerRope | None]]:
    """The readings of a config a port gets wrong: (diagnosis, config field, the layer as that
    reading has it; None: no rotation); ``bases``: the engine's own default rope_theta where
    it has one other than 10000 (what it falls back on when it does not read the config's)."""
    scaling = dict(layer.scaling or {})
    out: list[tuple[str, str, LayerRope | None]] = []
    if width == layer.head_dim and (layer.rotary_dim or scaling.get("partial_rotary_factor")
                                    not in (None, 1.0)):
        out.append(("rotates the whole head: the partial rotary width is ignored",
                    "partial_rotary_factor", LayerRope(layer.head_dim, {
                        k: v for k, v in scaling.items() if k != "partial_rotary_factor"})))
    if float(scaling.get("rope_theta", 10000.0)) != 10000.0:
        out.append(("the config's rope_theta is not read (base 10000)", "rope_theta",
                    LayerRope(layer.head_dim, {**scaling, "rope_theta": 10000.0},
                              layer.rotary_dim)))
    for base in dict.fromkeys(bases):
        if base not in (10000.0, float(scaling.get("rope_theta", 10000.0))):
            out.append((f"the config's rope_theta is not read (the engine's default base "
                        f"{base:g})", "rope_theta", LayerRope(
                            layer.head_dim, {**scaling, "rope_theta": base}, layer.rotary_dim)))
    if scaling.get("rope_type", "default") != "default":
        plain = {k: scaling[k] for k in ("rope_theta", "partial_rotary_factor") if k in scaling}
        out.append(("the rope scaling is dropped (default frequencies)", "rope_scaling",
                    LayerRope(layer.head_dim, {"rope_type": "default", **plain},
                              layer.rotary_dim)))
    if scaling.get("rope_type") == "yarn" and scaling.get("truncate") is False:
        out.append(("YaRN's truncate: false is not read (the correction range is floored and "
                    "ceiled)", "rope_scaling.truncate",
                    LayerRope(layer.head_dim, {**scaling, "truncate": True}, layer.rotary_dim)))
    if scaling.get("rope_type") == "longrope" and "long_factor" in scaling:
        out.append(("short_factor is never read: long_factor at every length",
                    "rope_scaling.short_factor",
                    LayerRope(layer.head_dim, {**scaling, "short_factor": scaling["long_factor"]},
                              layer.rotary_dim)))
    out.append(("not rotated", "layer_types / no_rope_layers", None))
    return out


def diagnose(x: np.ndarray, y: np.ndarray, positions: np.ndarray, layer: LayerRope,
             pairing: str, bases: tuple[float, ...] = ()) -> tuple[str, str]:
    """The first misreading whose float64 rotation the engine's ``y`` meets, and its field
    (``bases``: the engine's default rope_theta, see :func:`_variants`)."""
    scale = max(float(np.max(np.abs(x))), 1e-30)
    bound = float(np.max(np.abs(positions)))
    for note, where, variant in _variants(layer, x.shape[-1], bases):
        try:
            want = x if variant is None else rotate(x, positions, variant, pairing)
        except (PosencError, ValueError):
            continue
        if grade(y, want, scale=scale, angle_bound=bound)[0] is not None:
            return note, where
    for shift in (1, -1):  # the positions the engine is handed, not the config, are wrong
        try:
            want = rotate(x, positions + shift, layer, pairing)
        except (PosencError, ValueError):
            continue
        if grade(y, want, scale=scale, angle_bound=bound + 1)[0] is not None:
            return (f"positions off by {shift:+d} (each token rotated as position p {shift:+d})",
                    "positions / the cache offset")
    return "", ""




# -- the report ----------------------------------------------------------------------------------
def sweep_each(families: list[Any], truth: dict[str, dict[str, Any]], progress: Any,
               verdict: Callable[[Any, dict[str, Any]], EngineRow]) -> list[EngineRow]:
    """Every family's row, ``verdict(family, known)`` (``known``: the transformers sweep's
    entry for it in ``truth``), timed; a family whose sweep raises costs its own row only."""
    rows = []
    for family in families:
        if progress:
            progress(family.name)
        start = time.perf_counter()
        try:
            row = verdict(family, truth.get(family.name, {}))
        except Exception as exc:  # the sweep goes on
            row = EngineRow(family.name, "not checkable", reason=f"the sweep raised: {exc}")
        row.seconds = time.perf_counter() - start
        rows.append(row)
    return rows


def code_hash(files: list[Path], engine_version: str) -> str:
    """sha256 of the sweep's code and the engine version it ran."""
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode())
        digest.update(file.read_bytes().replace(b"\r\n", b"\n"))
    digest.update(engine_version.encode())
    return digest.hexdigest()


def write_report(path: Path, engine: str, versions: dict[str, str], seconds: float,
                 rows: list[EngineRow], code: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"engine": engine, "versions": versions,
                                "seconds": round(seconds, 1), "code": code,
                                "families": [r.as_dict() for r in rows]}, indent=1) + "\n",
                    encoding="utf-8")


def counts(rows: list[EngineRow]) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in rows:
        out[row.verdict] = out.get(row.verdict, 0) + 1
    return out
