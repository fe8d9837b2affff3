"""What ``posenc sweep transformers`` reads from a family's config (one rope per layer, posenc's
float64 rotation for it), how it grades a float32 result against that truth, and the records
it keeps (findings, verdicts). The checks are :mod:`posenc.conformance.sweeps.transformers_checks`; the
verdict, the page and the command :mod:`posenc.conformance.sweeps.transformers_sweep`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import posenc
from posenc.catalog import specs
from posenc.dialects.transformers import LAYER_TYPES, rope_layers
from posenc.dialects.transformers import has_rope as is_attention
from posenc.errors import PosencError

from ..tolerances import JUDGEABLE, PROFILES, compare, tolerance_for

DEFAULT_BASE = 10000.0  # RoFormer's base, where a config names none
POSENC_TYPES = LAYER_TYPES  # the layer types posenc's reader keys ropes by
LAYOUTS = ("half", "interleaved", "deinterleave", "half, mirrored", "interleaved, mirrored")


@dataclass
class Finding:
    """One comparison: what, the tightest profile met (None: none), the max abs error, and a
    diagnosis or note."""

    part: str  # "frequencies", "wiring", "bias"
    what: str
    grade: str | None
    max_abs: float
    note: str = ""
    field: str = ""  # the config field a divergence involves


@dataclass
class Verdict:
    family: str
    verdict: str  # conforms | diverges | not checkable | spec gap
    profile: str | None = None
    max_abs: float = 0.0
    pairing: str = ""
    checked: list[str] = field(default_factory=list)
    reason: str = ""
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0
    adjudication: str = ""  # for a divergence: a transformers bug, a convention, a posenc defect

    def as_dict(self) -> dict[str, Any]:
        return {"family": self.family, "verdict": self.verdict, "profile": self.profile,
                "max_abs": self.max_abs, "pairing": self.pairing, "checked": self.checked,
                "reason": self.reason, "adjudication": self.adjudication,
                "seconds": round(self.seconds, 3),
                "findings": [f.__dict__ for f in self.findings]}


# -- grading -------------------------------------------------------------------------------------
def grade(actual: np.ndarray, expected: np.ndarray, *, scale: float, angle_bound: float,
          spec: str = "rope") -> tuple[str | None, float, bool]:
    """(tightest profile met or None, max abs error, judgeable): float32 results against a
    float64 truth, with the spec's float32 tolerances."""
    overrides = specs()[spec].tolerances
    trig = specs()[spec].trigonometric
    if np.asarray(actual).shape != np.asarray(expected).shape:
        return None, float("inf"), True
    max_abs = float(np.max(np.abs(np.asarray(actual, np.float64) - expected), initial=0.0))
    for profile in PROFILES:
        tol = tolerance_for("float32", overrides, profile, trigonometric=trig)
        slack = tol.angle * tol.compute_eps * angle_bound + tol.atol
        if slack >= JUDGEABLE:  # this profile, and every looser one, cannot judge it
            # float32 arithmetic is judged under the conventional model or not at all
            return None, max_abs, profile == "reduced"
        if compare(actual, expected, tol, scale=scale, angle_bound=angle_bound).ok:
            return profile, max_abs, True
    return None, max_abs, True


def loosest(grades: Iterable[str | None]) -> str | None:
    grades = list(grades)
    if not grades or any(g is None for g in grades):
        return None
    return max(grades, key=PROFILES.index)


# -- what posenc reads from a config -------------------------------------------------------------
@dataclass
class LayerRope:
    head_dim: int
    scaling: dict[str, Any] | None  # None: a NoPE layer
    rotary_dim: int | None = None  # an explicit rotary_dim (GPT-J, CodeGen)
    layer_type: str = "all"
    declared: str | None = None  # a pairing the config names
    attention: bool = True  # False: a layer without attention (mamba, conv, linear)


def _rotary_dim(config: dict[str, Any]) -> int | None:
    """A config's ``rotary_dim`` (GPT-J, CodeGen), unless it has a partial_rotary_factor,
    which then rules (MiniMax documents ``rotary_dim`` and rotates by the factor)."""
    params = config.get("rope_parameters") or {}
    if config.get("partial_rotary_factor") is not None or (
            isinstance(params, dict) and params.get("partial_rotary_factor") is not None):
        return None
    value = config.get("rotary_dim")
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def expected_layers(config: dict[str, Any], n: int) -> tuple[list[LayerRope], list[str]]:
    """posenc's reading of the config: one rope (or None) per layer, and notes on what the
    sweep adjusted in the config before posenc read it. Layers whose type is not an attention
    type (a hybrid model's mamba, conv or linear-attention layers) have no rope. A config
    naming no rope at all (GPT-J, CodeGen: the base is fixed in their code) reads as base
    10000."""
    notes = []
    types = list(config.get("layer_types") or [])
    blocks = config.get("block_types")
    if not types and isinstance(blocks, list) and blocks:  # RecurrentGemma's cycle
        types = [blocks[i % len(blocks)] for i in range(n)]
    read = dict(config)  # layer types without attention: posenc's reader skips them
    if len(types) > n and len(attention := [t for t in types if is_attention(t)]) == n:
        # Dory's config.json lists each layer as (attention, mlp) blocks: DoryConfig keeps
        # the attention entries, one per layer
        types = read["layer_types"] = attention
        notes.append("layer_types lists attention and mlp blocks: one layer per attention "
                     "block, as the config class reads it")
    if not any(config.get(k) for k in ("rope_parameters", "rope_scaling", "rope_theta")):
        read["rope_theta"] = DEFAULT_BASE
        notes.append("no rope_theta in the config: base 10000")
    layers = rope_layers(read)
    # the pairing a config names (DeepSeek's rope_interleave); otherwise the family's own
    declared = None
    if config.get("rope_interleave") is not None:
        declared = "deinterleave" if config["rope_interleave"] else "half"
    rd = _rotary_dim(config)
    try:
        per_layer = posenc.layer_rope_parameters(read)
    except posenc.ParameterError:
        per_layer = None
    out = []
    for i in range(n):
        t = types[i] if i < len(types) else "all"
        if types and not is_attention(t):
            out.append(LayerRope(0, None, None, t, None, attention=False))
            continue
        layer = layers.get(t) or layers.get("all") or next(iter(layers.values()))
        scaling: dict[str, Any] | None = dict(layer.scaling)
        if per_layer is not None:
            chosen = per_layer[i] if i < len(per_layer) else None
            scaling = None if chosen is None else {**layer.scaling, **chosen}
        out.append(LayerRope(layer.head_dim, scaling, rd, t, declared))
    return out, notes


def seq_len_for(scaling: dict[str, Any], positions: np.ndarray) -> int | None:
    if scaling.get("rope_type") in ("dynamic", "longrope"):
        return int(np.max(np.abs(positions))) + 1
    return None


def rotate(x: np.ndarray, positions: np.ndarray, layer: LayerRope, layout: str,
           width: int | None = None) -> np.ndarray:
    """posenc's float64 rotation of x [b, h, s, d] at positions [b, s]: the whole head
    (the config's rotary width inside it) or, for a captured slice of ``width`` features,
    that slice rotated with the width's own frequencies."""
    assert layer.scaling is not None
    if layout.endswith(", mirrored"):  # rotated by -θ: posenc's rope at -positions
        return rotate(x, -positions, layer, layout.split(",")[0], width)
    scaling = dict(layer.scaling)
    rd = layer.rotary_dim
    if width is not None and width != x.shape[-1]:
        raise ValueError("width mismatch")
    if x.shape[-1] != layer.head_dim:  # a captured rotary slice: rotate all of it
        scaling.pop("partial_rotary_factor", None)
        rd = None
    seq_len = seq_len_for(scaling, positions)
    if "mrope_section" in scaling or "xdrope_section" in scaling:
        # text tokens: every position row equal, as the model expands 2-D position ids
        axes = 4 if "xdrope_section" in scaling else 3
        rows = np.broadcast_to(positions, (axes, *positions.shape)).copy()
        if layout == "deinterleave":
            raise ValueError("M-RoPE with a de-interleaved pairing")
        return np.asarray(posenc.mrope(x, rows, scaling=scaling, layout=layout))
    if layout == "deinterleave":
        nope = np.zeros((*x.shape[:-1], 2))
        q, _, _ = posenc.mla_rope(np.concatenate([nope, x], -1), x[:, :1], positions,
                                  scaling=scaling, layout="deinterleave")
        return np.asarray(q)[..., 2:]
    if seq_len is not None:
        return np.asarray(posenc.rope(x, positions, layout=layout, rotary_dim=rd,
                                      scaling=scaling, seq_len=seq_len))
    return np.asarray(posenc.rope(x, positions, layout=layout, rotary_dim=rd, scaling=scaling))


def rotary_width(layer: LayerRope) -> int:
    if layer.rotary_dim:
        return layer.rotary_dim
    factor = (layer.scaling or {}).get("partial_rotary_factor")
    if factor is not None and (layer.scaling or {}).get("rope_type") != "proportional":
        return int(layer.head_dim * factor)
    return layer.head_dim


def best_pairing(x: np.ndarray, y: np.ndarray, positions: np.ndarray, layer: LayerRope,
                 pairings: Iterable[str], *, scale: float, angle_bound: float
                 ) -> tuple[str | None, float, str, bool]:
    """``(tightest profile, max abs error, pairing, judgeable)`` of the pairing among
    ``pairings`` whose float64 rotation fits ``y = rope(x)`` best: the tightest-graded, or
    with none graded the closest (a pairing the layer cannot take is passed over); the
    transformers sweep and the engine sweeps judge a captured rotation by it."""
    pairings = list(pairings)
    best: tuple[str | None, float, str] = (None, float("inf"), pairings[0])
    judged = True
    for layout in pairings:
        try:
            want = rotate(x, positions, layer, layout)
        except (PosencError, ValueError):
            continue
        g, err, judged = grade(y, want, scale=scale, angle_bound=angle_bound)
        if g is not None and (best[0] is None or PROFILES.index(g) < PROFILES.index(best[0])):
            best = (g, err, layout)
        elif best[0] is None and err < best[1]:
            best = (None, err, layout)
    return (*best, judged)
