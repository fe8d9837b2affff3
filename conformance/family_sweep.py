"""``posenc sweep transformers``: every transformers model family with a rotary embedding or a
relative/ALiBi bias, checked from its own config against posenc's float64 functions, with a
verdict per family; ``docs/families.md`` is generated from one full run.

What a family computes is observed by :mod:`posenc.backends.transformers_families` (a
tiny randomly initialised model, float32). This module judges it:

- **frequencies**: the rotary module's ``inv_freq``, ``attention_scaling`` and cos/sin at
  positions up to past the original context against :func:`posenc.rope_frequencies` for the
  config's ``rope_parameters`` as posenc reads them (:func:`posenc.dialects.transformers.rope_layers`;
  layer-keyed dicts per layer type);
- **wiring**: each recorded ``apply_rotary*`` call of the forward (a left-padded prefill with
  explicit position ids, a KV-cache decode step) against :func:`posenc.rope` on the captured
  input in float64, for that layer's rope (:func:`posenc.layer_rope_parameters` for the model
  types posenc has a layer schedule for: NoPE layers, sliding vs global bases);
- **biases**: ALiBi builders against :func:`posenc.alibi_bias`, T5-style ``compute_bias``
  against :func:`posenc.t5_bias`.

Every comparison is graded with posenc's precision profiles (``exact``, ``conventional``:
float32 angles and frequencies, ``reduced``) by :func:`posenc.conformance.tolerances.compare`;
a comparison whose tolerance under a profile reaches 1% of the data's scale is not judged
under that profile. The pairing (half, interleaved, or DeepSeek's de-interleave) is the family's
convention unless its config names one. A family meeting no profile is diagnosed by trying
the readings a port gets wrong (full width for a partial rotary, the scaling dropped, another
layer type's rope, no rotation, positions ignored, the attention factor) and naming the
config field involved.

Freshness: the page records a hash of the sweep's code (this module and the observer) and the
transformers version; ``posenc sweep transformers --check`` and the docs test recompute it
without running the sweep.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import posenc
from posenc.catalog import specs
from posenc.dialects.transformers import rope_layers
from posenc.errors import PosencError

from .scoreboard import HASH_LINE, freshness_exit, recorded_hash
from .tolerances import JUDGEABLE, PROFILES, compare, tolerance_for

MARKDOWN = "families.md"
DEFAULT_BASE = 10000.0  # RoFormer's base, where a config names none
LAYOUTS = ("half", "interleaved", "deinterleave", "half, mirrored", "interleaved, mirrored")
POSENC_TYPES = ("full_attention", "sliding_attention", "chunked_attention")


def is_attention(layer_type: str) -> bool:
    """An attention layer type (``indexed_attention`` too); a hybrid model's ``mamba``,
    ``conv``, ``linear_attention`` layers have no rope."""
    return "attention" in layer_type and not layer_type.startswith("linear")
# the representative families CI runs (tests/test_family_sweep.py)
REPRESENTATIVE = ("llama", "gptj", "gpt_neox", "phi3", "gemma3", "qwen2_vl", "deepseek_v3",
                  "cohere", "bloom", "t5")


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


def _loosest(grades: Iterable[str | None]) -> str | None:
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
    read = dict(config)
    if types and any(t not in POSENC_TYPES for t in types):
        # the types posenc's reader knows; the others' rope is the flat one, if any
        read["layer_types"] = [t for t in types if t in POSENC_TYPES]
    if not any(config.get(k) for k in ("rope_parameters", "rope_scaling", "rope_theta")):
        read["rope_theta"] = DEFAULT_BASE
        notes.append("no rope_theta in the config: base 10000")
    params = read.get("rope_parameters")
    if config.get("qk_rope_head_dim") and isinstance(params, dict) and \
            params.get("partial_rotary_factor") and config.get("head_dim") and abs(
                config["head_dim"] * params["partial_rotary_factor"]
                - config["qk_rope_head_dim"]) < 0.5:
        # Mistral 4: the factor says qk_rope_head_dim / head_dim, the slice posenc already
        # takes as the rotary head (posenc.dialects.transformers would apply it twice)
        read["rope_parameters"] = {k: v for k, v in params.items()
                                   if k != "partial_rotary_factor"}
        notes.append("partial_rotary_factor = qk_rope_head_dim / head_dim dropped (posenc's "
                     "reader would apply it to qk_rope_head_dim again)")
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
        head_dim = layer.head_dim
        override = (config.get("per_layer_config") or {}).get(str(i)) or {}
        if override.get("head_dim") and not config.get("qk_rope_head_dim"):
            # transformers 5.24 saves Gemma 4's global_head_dim as per_layer_config
            head_dim = int(override["head_dim"])
            note = ("per_layer_config's head_dim read by the sweep (posenc's reader takes "
                    "global_head_dim only)")
            if note not in notes:
                notes.append(note)
        scaling: dict[str, Any] | None = dict(layer.scaling)
        if per_layer is not None:
            chosen = per_layer[i] if i < len(per_layer) else None
            scaling = None if chosen is None else {**layer.scaling, **chosen}
        out.append(LayerRope(head_dim, scaling, rd, t, declared))
    return out, notes


def _seq_len(scaling: dict[str, Any], positions: np.ndarray) -> int | None:
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
    seq_len = _seq_len(scaling, positions)
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


# -- wiring --------------------------------------------------------------------------------------
def _bhsd(x: np.ndarray, batch: int, seq: int) -> np.ndarray | None:
    """A captured q or k as [batch, heads, seq, dim] (transformers passes [b, h, s, d], some
    families [b, s, h, d])."""
    if x.ndim != 4 or x.shape[0] != batch:
        return None
    if x.shape[2] == seq:
        return x
    if x.shape[1] == seq:
        return x.transpose(0, 2, 1, 3)
    return None


def _alternatives(layer: LayerRope, x: np.ndarray, pos: np.ndarray, layout: str,
                  layers: list[LayerRope]) -> list[tuple[str, str, Callable[[], np.ndarray]]]:
    """Readings a port gets wrong: (diagnosis, config field, what posenc computes for it)."""
    scaling = layer.scaling or {}
    alts: list[tuple[str, str, Callable[[], np.ndarray]]] = []
    if x.shape[-1] == layer.head_dim and (scaling.get("partial_rotary_factor") not in (None, 1.0)
                                          or layer.rotary_dim):
        full = LayerRope(layer.head_dim, {k: v for k, v in scaling.items()
                                          if k != "partial_rotary_factor"}, None)
        alts.append(("rotates the whole head: the partial rotary width is ignored",
                     "partial_rotary_factor" if layer.rotary_dim is None else "rotary_dim",
                     lambda: rotate(x, pos, full, layout)))
    if scaling.get("rope_type", "default") != "default":
        plain = LayerRope(layer.head_dim, {"rope_type": "default",
                                           "rope_theta": scaling.get("rope_theta", 10000.0),
                                           **({"partial_rotary_factor":
                                               scaling["partial_rotary_factor"]}
                                              if "partial_rotary_factor" in scaling else {})},
                          layer.rotary_dim)
        alts.append(("the rope scaling is dropped (default frequencies)",
                     "rope_parameters.rope_type", lambda: rotate(x, pos, plain, layout)))
    for other in layers:
        if other.scaling and other.scaling != scaling and other.head_dim == layer.head_dim:
            alts.append((f"rotated with the {other.layer_type} layers' rope",
                         f"rope_parameters[{layer.layer_type}]",
                         lambda other=other: rotate(x, pos, other, layout)))
            break
    alts.append(("positions ignored: rotated at 0, 1, 2, ... (not the given position ids)",
                 "position_ids", lambda: rotate(x, np.broadcast_to(
                     np.arange(x.shape[2]), pos.shape).copy(), layer, layout)))
    alts.append(("not rotated (a NoPE layer to the family)", "layer_types / no_rope_layers",
                 lambda: x))
    return alts


def check_wiring(obs: Any, layers: list[LayerRope]) -> tuple[list[Finding], str]:
    """The findings of the recorded calls, and the pairing that fits them."""
    from posenc.backends.transformers_families import (
        DECODE_POSITIONS,
        PREFILL_POSITIONS,
    )

    positions = {"prefill": np.array(PREFILL_POSITIONS), "decode": np.array(DECODE_POSITIONS)}
    findings: list[Finding] = []
    pairings: set[str] = set()
    rotated_layers: set[int] = set()
    for call in obs.calls:
        phase, idx = call["phase"], call["layer"]
        if idx is None or idx >= len(layers):
            continue
        pos = positions[phase]
        layer = layers[idx]
        for n, (x_in, x_out) in enumerate(call["pairs"]):
            x = _bhsd(x_in, *pos.shape)
            y = _bhsd(x_out, *pos.shape)
            what = f"layer {idx} {phase} {'qk'[n] if n < 2 else n} ({call['function']})"
            if x is None or y is None or x.shape != y.shape:
                findings.append(Finding("wiring", what, None, float("inf"),
                                        f"unexpected shapes {x_in.shape} -> {x_out.shape}"))
                continue
            rotated_layers.add(idx)
            scale = max(float(np.max(np.abs(x))), 1e-30)
            if not layer.attention:
                g, err, _ = grade(y, x, scale=scale, angle_bound=0.0)
                findings.append(Finding("wiring", what, g, err, "" if g else
                                        f"{UNKNOWN_TYPE} {layer.layer_type!r}",
                                        "" if g else "layer_types"))
                continue
            if layer.scaling is None:
                g, err, _ = grade(y, x, scale=scale, angle_bound=0.0)
                findings.append(Finding("wiring", what, g, err,
                                        "" if g else "rotates a layer posenc reads as NoPE",
                                        "" if g else "layer_types / no_rope_layers"))
                continue
            width_ok = x.shape[-1] in (layer.head_dim, _width(layer))
            if not width_ok:
                findings.append(Finding(
                    "wiring", what, None, float("inf"),
                    f"rotates a slice of {x.shape[-1]} features; posenc reads a head of "
                    f"{layer.head_dim} with {_width(layer)} rotated", "partial_rotary_factor"))
                continue
            bound = float(np.max(np.abs(pos)))
            layouts = [layer.declared] if layer.declared else list(LAYOUTS)
            best: tuple[str | None, float, str] = (None, float("inf"), layouts[0])
            for layout in layouts:
                try:
                    want = rotate(x, pos, layer, layout)
                except (PosencError, ValueError):
                    continue
                g, err, _ = grade(y, want, scale=scale, angle_bound=bound)
                if g is not None and (best[0] is None or PROFILES.index(g) <
                                      PROFILES.index(best[0])):
                    best = (g, err, layout)
                elif best[0] is None and err < best[1]:
                    best = (None, err, layout)
            g, err, layout = best
            note, where = "", ""
            if g is None:
                note, where = _diagnose(y, scale, bound, _alternatives(layer, x, pos, layout,
                                                                        layers))
                if not note and layer.declared:
                    for other in LAYOUTS:
                        if other != layer.declared and grade(
                                y, rotate(x, pos, layer, other), scale=scale,
                                angle_bound=bound)[0]:
                            note = (f"pairs as {other!r} where the config declares "
                                    f"{layer.declared!r}")
                            where = "rope_interleave"
                            break
            else:
                pairings.add(layout)
            findings.append(Finding("wiring", what, g, err, note, where))
    for i, layer in enumerate(layers):
        if layer.scaling is not None and i not in rotated_layers and rotated_layers and \
                "forward" not in obs.problems and layer.attention:
            findings.append(Finding("wiring", f"layer {i} ({layer.layer_type})", None,
                                    float("inf"), NOT_ROTATED, "layer_types / no_rope_layers"))
    return findings, "/".join(sorted(pairings))


def _width(layer: LayerRope) -> int:
    if layer.rotary_dim:
        return layer.rotary_dim
    factor = (layer.scaling or {}).get("partial_rotary_factor")
    if factor is not None and (layer.scaling or {}).get("rope_type") != "proportional":
        return int(layer.head_dim * factor)
    return layer.head_dim


def _diagnose(y: np.ndarray, scale: float, bound: float,
              alternatives: list[tuple[str, str, Callable[[], np.ndarray]]]) -> tuple[str, str]:
    for name, where, compute in alternatives:
        try:
            other = compute()
        except (PosencError, ValueError):
            continue
        if grade(y, other, scale=scale, angle_bound=bound)[0] is not None:
            return name, where
    return "", ""


# -- frequencies ---------------------------------------------------------------------------------
def check_tables(obs: Any, layers: list[LayerRope]) -> list[Finding]:
    findings = []
    by_type = {layer.layer_type: layer for layer in layers if layer.scaling is not None}
    for entry in obs.tables:
        layer = by_type.get(entry["layer_type"] or "all") or next(iter(by_type.values()), None)
        if layer is None or layer.scaling is None:
            continue
        label = entry["layer_type"] or "all layers"
        pos = np.asarray(entry["positions"], dtype=np.float64)
        scaling = dict(layer.scaling)
        seq_len = _seq_len(scaling, pos)
        try:
            inv, factor = posenc.rope_frequencies(layer.head_dim, scaling=scaling,
                                                  seq_len=seq_len, dtype=np.float64)
        except PosencError as exc:
            findings.append(Finding("frequencies", label, None, float("inf"),
                                    f"posenc cannot read the config: {exc}", "rope_parameters"))
            continue
        inv = np.asarray(inv, dtype=np.float64)
        if layer.rotary_dim:
            inv = np.asarray(posenc.rope_frequencies(layer.rotary_dim, scaling={
                k: v for k, v in scaling.items() if k != "partial_rotary_factor"},
                seq_len=seq_len, dtype=np.float64)[0], dtype=np.float64)
        if "inv_freq" in entry and entry["inv_freq"].shape == inv.shape and seq_len is None:
            g, err, _ = grade(entry["inv_freq"], inv, scale=float(np.max(inv)),
                              angle_bound=0.0, spec="rope_frequencies")
            note = ""
            if g is None:  # ERNIE 4.5-VL stores its ladder permuted for its h/w sections
                g, err, _ = grade(np.sort(entry["inv_freq"]), np.sort(inv),
                                  scale=float(np.max(inv)), angle_bound=0.0,
                                  spec="rope_frequencies")
                note = ("posenc's frequencies stored in another order (the family's "
                        "M-RoPE section ordering)") if g else ""
            findings.append(Finding("frequencies", f"{label} inv_freq", g, err, note))
        elif "inv_freq" in entry and entry["inv_freq"].shape != inv.shape:
            findings.append(Finding(
                "frequencies", f"{label} inv_freq", None, float("inf"),
                f"{entry['inv_freq'].shape[-1]} frequencies; posenc reads {inv.shape[0]} "
                f"(head_dim {layer.head_dim}, rotary width {_width(layer)})",
                "rotary_dim" if layer.rotary_dim else "partial_rotary_factor"))
        if "attention_scaling" in entry:
            err = abs(entry["attention_scaling"] - float(factor))
            ok = err <= 4 * np.finfo(np.float32).eps * max(1.0, float(factor))
            findings.append(Finding("frequencies", f"{label} attention_scaling",
                                    "exact" if ok else None, err,
                                    "" if ok else f"{entry['attention_scaling']:.7g}; posenc "
                                    f"{float(factor):.7g}", "" if ok else "rope_parameters"))
        if "cos" not in entry:
            continue
        findings.append(_table_finding(entry, pos, inv, float(factor), label, layer))
    return findings


def _arrangements(angles: np.ndarray) -> dict[str, np.ndarray]:
    return {"half": np.concatenate([angles, angles], -1),
            "interleaved": np.repeat(angles, 2, -1), "frequencies": angles}


def _table_finding(entry: dict[str, Any], pos: np.ndarray, inv: np.ndarray, factor: float,
                   label: str, layer: LayerRope) -> Finding:
    cos, sin = entry["cos"], entry["sin"]
    rows = len(pos)
    cos = cos.reshape(-1, cos.shape[-2], cos.shape[-1])
    sin = sin.reshape(-1, sin.shape[-2], sin.shape[-1])
    if cos.shape[1] != rows:
        return Finding("frequencies", f"{label} cos/sin", None, float("inf"),
                       f"cos/sin of shape {entry['cos'].shape} for {rows} positions")
    cos, sin = cos[0], sin[0]
    angles = pos[:, None] * inv[None, :]
    best: Finding | None = None
    for order, (first, second) in (("", (cos, sin)), (", sin first", (sin, cos))):
        for name, arranged in _arrangements(angles).items():
            if arranged.shape[-1] != first.shape[-1]:
                continue
            grades, worst, skipped = [], 0.0, set()
            for r in range(rows):
                bound = float(np.max(np.abs(angles[r]), initial=0.0))
                for got, want in ((first[r], factor * np.cos(arranged[r])),
                                  (second[r], factor * np.sin(arranged[r]))):
                    g, err, judged = grade(got, want, scale=max(factor, 1.0), angle_bound=bound)
                    if judged:
                        grades.append(g)
                        worst = max(worst, err)
                    else:
                        skipped.add(int(pos[r]))
            g = _loosest(grades)
            note = "; ".join(n for n in (entry.get("note", ""), f"positions {min(skipped)}+ "
                             "not judgeable in float32" if skipped else "") if n)
            finding = Finding("frequencies", f"{label} cos/sin ({name}{order})", g, worst, note)
            if best is None or (g is not None and (best.grade is None or PROFILES.index(g) <
                                                   PROFILES.index(best.grade))) or (
                    g is None and best.grade is None and worst < best.max_abs):
                best = finding
    if best is None:
        return Finding("frequencies", f"{label} cos/sin", None, float("inf"),
                       f"cos/sin width {cos.shape[-1]}; posenc reads {inv.shape[0]} "
                       f"frequencies (head_dim {layer.head_dim}, rotary width {_width(layer)})",
                       "rotary_dim" if layer.rotary_dim else "partial_rotary_factor")
    return best


# -- biases --------------------------------------------------------------------------------------
def _bfloat16(x: np.ndarray) -> np.ndarray:
    """Round to bfloat16 (8 significant bits, ties to even), in NumPy."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def _row_relative(bias: np.ndarray) -> np.ndarray:
    """A bias up to a constant per query row (what softmax sees): minus its first key."""
    return bias - bias[..., :1]


def _bucket_finding(b: dict[str, Any]) -> Finding:
    """Integer buckets: equal to posenc's t5_bucket (T5's defaults, 32 buckets up to 128),
    or to it at the negated distance (query − key, a sign convention)."""
    bidirectional = True if b["bidirectional"] is None else b["bidirectional"]
    what = f"{b['function']}({'bidirectional' if bidirectional else 'causal'}, -300..300)"
    for sign, note in ((1, ""), (-1, "distances counted query − key (T5 counts key − query): "
                                      "a sign convention of the caller")):
        want = np.asarray(posenc.t5_bucket(sign * b["relative"], bidirectional=bidirectional))
        if np.array_equal(b["buckets"], want):
            return Finding("bias", what, "exact", 0.0, note)
    want = np.asarray(posenc.t5_bucket(b["relative"], bidirectional=bidirectional))
    wrong = int(np.sum(b["buckets"] != want))
    return Finding("bias", what, None, float(np.max(np.abs(b["buckets"] - want))),
                   f"{wrong} of {want.size} buckets differ from T5's",
                   "relative_attention_num_buckets")


def check_biases(obs: Any) -> list[Finding]:
    findings = []
    for b in obs.biases:
        if b["kind"] == "alibi":
            want = np.asarray(posenc.alibi_bias(b["heads"], 1, b["k_len"], form="key_only",
                                                dtype=np.float64), dtype=np.float64)
            want = _row_relative(want.reshape(b["heads"], 1, b["k_len"]))
            got = _row_relative(b["bias"])
            scale = float(np.max(np.abs(want)))
            g, err, _ = grade(got, want, scale=scale, angle_bound=0.0, spec="alibi_bias")
            note, where = "", ""
            if g is None:
                where = "n_heads"
                note = "slopes differ from Press et al.'s"
                rounded = grade(got, _bfloat16(want), scale=scale, angle_bound=0.0,
                                spec="alibi_bias")[0]
                if rounded:
                    note = "slope·j rounded to bfloat16 (matches posenc's bias rounded so)"
                    where = ""
            findings.append(Finding("bias", f"{b['function']} ({b['heads']} heads, up to a "
                                    "constant per row)", g, err, note, where))
        elif b["kind"] == "bucket":
            findings.append(_bucket_finding(b))
        else:
            for row in b["rows"]:
                want = np.asarray(posenc.t5_bias(
                    row["q_len"], row["k_len"], b["table"], bidirectional=b["bidirectional"],
                    num_buckets=b["num_buckets"], max_distance=b["max_distance"],
                    query_offset=row["offset"]), dtype=np.float64)
                got = row["bias"].reshape(-1, *want.shape[-3:])[0] if row["bias"].ndim == 4 \
                    else row["bias"]
                g, err, _ = grade(got, want, scale=float(np.max(np.abs(want))),
                                  angle_bound=0.0, spec="t5_bias")
                what = (f"{b['function']} {'decoder' if b['decoder'] else 'encoder'} "
                        f"q={row['q_len']} k={row['k_len']} offset={row['offset']}")
                findings.append(Finding("bias", what, g, err, "" if g else
                                        "buckets differ from T5's", "" if g else
                                        "relative_attention_num_buckets"))
    return findings


# -- one family ----------------------------------------------------------------------------------
NOT_ROTATED = "no rotation recorded on a layer posenc reads as rotated"
UNKNOWN_TYPE = "rotates a layer of a type posenc's reader does not know:"
# divergences adjudicated by hand, with their evidence: (family, diagnosis substring) ->
# (adjudication, explanation); tests/test_family_sweep.py holds the independent evidence
ADJUDICATED = {
    ("minimax_m3_vl", "rotary_dim"): (
        "transformers bug", "MiniMaxM3VLTextConfig documents rotary_dim (64 of 128 channels "
        "rotated) but MiniMaxM3VLRotaryEmbedding never reads it and rotates "
        "head_dim * rope_parameters.get('partial_rotary_factor', 1.0) channels: all of them "
        "(docs/known-issues.md)"),
    ("falcon", "bfloat16"): (
        "documented convention", "Falcon's build_alibi_tensor rounds slope·j to bfloat16, as "
        "the original Falcon code does (spec/alibi_bias.yaml notes it; posenc keeps exact "
        "slopes)"),
}


def judge(obs: Any) -> Verdict:
    """The verdict on one observation."""
    verdict = Verdict(obs.family, "")
    findings: list[Finding] = []
    layers: list[LayerRope] = []
    adjusted: list[str] = []
    if obs.config and "vocab_size" not in obs.config:
        return Verdict(obs.family, "not checkable", reason=(
            f"{obs.rotary_class} belongs to a model without a vocabulary ({obs.config_class}): "
            "a vision or audio rotary, which this sweep does not check (posenc.axial_rope "
            "and friends)"))
    if obs.config:
        try:
            n = obs.layers or int(obs.config.get("num_hidden_layers") or 0) or len(
                obs.config.get("layer_types") or [1])
            layers, adjusted = expected_layers(obs.config, n)
        except PosencError as exc:
            if "must be even" in str(exc):  # the shrunk head, not the family
                return Verdict(obs.family, "not checkable", reason=f"the shrunk config's "
                               f"rotary width is odd: {exc}")
            if "rotary width is unknown" in str(exc):  # a composite config the sweep took
                return Verdict(obs.family, "not checkable", reason=(
                    f"{obs.config_class} holds its text model's sizes in a sub-config the "
                    f"sweep does not pick: {exc}"))
            return Verdict(obs.family, "spec gap", reason=f"posenc cannot read the config's "
                           f"rope: {exc}")
        findings += check_tables(obs, layers)
        if obs.calls:
            wiring, verdict.pairing = check_wiring(obs, layers)
            findings += wiring
    findings += check_biases(obs)
    verdict.findings = findings
    verdict.checked = sorted({f.part for f in findings})
    problems = "; ".join(f"{k}: {v}" for k, v in obs.problems.items())
    if not findings:
        verdict.verdict = "not checkable"
        verdict.reason = problems or obs.wiring or "nothing observable"
        return verdict
    verdict.max_abs = max((f.max_abs for f in findings if np.isfinite(f.max_abs)), default=0.0)
    failed = [f for f in findings if f.grade is None]
    unrotated = {f.what.split("(")[-1].rstrip(")") for f in failed if f.note == NOT_ROTATED}
    model_type = obs.config.get("model_type", obs.family)
    if failed and len(unrotated) == 1 and all(f.note == NOT_ROTATED for f in failed):
        # every rotation recorded conforms; one layer type is left unrotated: a NoPE
        # schedule (Cohere2's, Llama 4's kind) that posenc's layer_schedule has no rule for
        verdict.verdict = "spec gap"
        verdict.profile = _loosest(f.grade for f in findings if f.grade is not None)
        verdict.reason = (f"NoPE on the {unrotated.pop()} layers ("
                          f"{', '.join(f.what.split(' (')[0] for f in failed)}); every recorded "
                          f"rotation conforms: a layer schedule posenc.layer_schedule has no "
                          f"rule for (model_type {model_type!r})")
    elif failed and all(f.note.startswith(UNKNOWN_TYPE) for f in failed):
        verdict.verdict = "spec gap"
        verdict.reason = "; ".join(sorted({f.note for f in failed})) + (
            f" (model_type {model_type!r}): posenc.dialects.transformers reads "
            f"{', '.join(POSENC_TYPES)} only")
    elif failed:
        verdict.verdict = "diverges"
        notes = {}
        for f in failed:
            notes.setdefault((f.note or "no reading posenc knows matches", f.field), []).append(
                f.what)
        verdict.reason = "; ".join(
            f"{note}" + (f" [{where}]" if where else "") + f" ({', '.join(whats[:3])}"
            + (f" and {len(whats) - 3} more" if len(whats) > 3 else "") + ")"
            for (note, where), whats in notes.items())
    else:
        verdict.verdict = "conforms"
        verdict.profile = _loosest(f.grade for f in findings)
        verdict.reason = "; ".join(dict.fromkeys(f.note for f in findings if f.note))
    extra = []
    if "wiring" not in verdict.checked and obs.config:
        extra.append(f"wiring not checked: {obs.problems.get('forward') or obs.wiring}")
    if "frequencies" not in verdict.checked and obs.config:
        extra.append("frequencies not checked: " + (
            obs.problems.get("tables") or obs.problems.get("tables[None]") or "no table"))
    if adjusted:
        extra.append("; ".join(adjusted))
    if extra:
        verdict.reason = "; ".join([r for r in (verdict.reason, *extra) if r])
    for (family, key), (kind, text) in ADJUDICATED.items():
        if family == obs.family and key in verdict.reason:
            verdict.adjudication = f"{kind}: {text}"
    return verdict


def sweep(names: Iterable[str] | None = None,
          progress: Callable[[str], None] | None = None, *,
          isolated: bool = True) -> list[Verdict]:
    """Verdicts on the named families (default: every one found); each family is observed in
    a forked process unless ``isolated`` is False."""
    from posenc.backends import transformers_families as observer

    verdicts = []
    if isolated:
        observer.preload()
    for family in observer.discover(list(names) if names else None):
        if progress:
            progress(family.name)
        start = time.perf_counter()
        try:
            observe = observer.observe_isolated if isolated else observer.observe
            verdict = judge(observe(family))
        except Exception as exc:  # the sweep goes on
            verdict = Verdict(family.name, "not checkable",
                              reason=f"the sweep raised: {observer.last_frame(exc)}")
        verdict.seconds = time.perf_counter() - start
        verdicts.append(verdict)
    return verdicts


# -- the page ------------------------------------------------------------------------------------
def inputs_hash(transformers_version: str) -> str:
    """sha256 of the sweep's code and the transformers version it ran."""
    import posenc.backends

    observer = Path(posenc.backends.__file__).parent / "transformers_families.py"
    digest = hashlib.sha256()
    for file in (Path(__file__), observer):
        digest.update(file.name.encode())
        digest.update(file.read_bytes().replace(b"\r\n", b"\n"))
    digest.update(f"transformers {transformers_version}".encode())
    return digest.hexdigest()


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _notes(v: Verdict) -> str:
    return " ".join(x for x in (v.reason, f"**{v.adjudication}**" if v.adjudication else "")
                    if x)


def markdown(verdicts: list[Verdict], *, versions: dict[str, str], seconds: float) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.verdict] = counts.get(v.verdict, 0) + 1
    lines = [
        "# transformers model families, checked from their configs", "",
        "Every model family of the installed transformers that defines a `*RotaryEmbedding` "
        "class or an ALiBi / T5-style relative bias (found in the package's modeling sources), "
        "built from its config class with the sizes shrunk (no weights, no hub) and checked "
        "against posenc's float64 functions. Generated by `posenc sweep transformers` from "
        "one run; do not edit by hand. How each family is checked: "
        "[`conformance/family_sweep.py`](../conformance/family_sweep.py).", "",
        f"Run: {now} on {platform.machine()} {platform.system()} ({os.cpu_count()} cores), "
        f"Python {versions['python']}, transformers {versions['transformers']}, torch "
        f"{versions['torch']}, posenc {posenc.__version__}; {len(verdicts)} families in "
        f"{seconds:.0f} s.", "",
        "Verdicts: " + ", ".join(f"**{k}** {n}" for k, n in sorted(counts.items())) + ".", "",
        "Columns: **checked** is what was compared (frequencies: the rotary module's inv_freq, "
        "attention scaling and cos/sin up to past the original context; wiring: q and k "
        "before and after the family's own `apply_rotary*` in a left-padded prefill and a "
        "KV-cache decode step, per layer; bias: the family's ALiBi or T5 bias functions); "
        "**profile** is the tightest precision profile every comparison meets (`exact`: "
        "posenc's own float32 standard; `conventional`: float32 angles m·θ and float32 "
        "frequencies, as transformers computes them); **max error** the largest absolute "
        "error against the float64 truth; **pairing** the rotary pairing that fits the "
        "family (its convention unless the config names one).", "",
        "| family | verdict | profile | max error | pairing | checked | notes |",
        "|---|---|---|---|---|---|---|"]
    for v in verdicts:
        err = f"{v.max_abs:.1e}" if v.findings else "—"
        lines.append(f"| `{v.family}` | {v.verdict} | {v.profile or '—'} | {err} | "
                     f"{v.pairing or '—'} | {', '.join(v.checked) or '—'} | "
                     f"{_cell(_notes(v))} |")
    lines += ["", HASH_LINE.format(inputs_hash(versions["transformers"])), ""]
    return "\n".join(lines)


def recorded_version(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith("Run: ") and "transformers " in line:
            return line.split("transformers ", 1)[1].split(",", 1)[0]
    return None


def check(path: Path) -> str | None:
    """Why ``path`` is stale (None: generated by this code, for the transformers it names)."""
    if not path.exists():
        return f"{path} is missing"
    text = path.read_text(encoding="utf-8")
    version = recorded_version(text)
    if version is None or recorded_hash(text) != inputs_hash(version):
        return f"{path} was generated by other sweep code (run `posenc sweep transformers`)"
    return None


# -- the command ---------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("library", choices=["transformers"], help="the library to sweep")
    parser.add_argument("--family", action="append", metavar="NAME",
                        help="a family (its folder under transformers.models, e.g. llama, "
                             "gpt_neox; repeatable; default: every family found)")
    parser.add_argument("--json", metavar="PATH", help="write the verdicts as JSON")
    parser.add_argument("--out", default="docs", metavar="DIR",
                        help="where a full run writes families.md (default: docs)")
    parser.add_argument("--check", action="store_true",
                        help="run nothing; fail when docs/families.md is stale")


def main_args(args: argparse.Namespace) -> int:
    path = Path(args.out) / MARKDOWN
    if args.check:
        return freshness_exit(check(path), path)
    from posenc.backends import transformers_families as observer

    known = {f.name for f in observer.discover()}
    unknown = sorted(set(args.family or []) - known)
    if unknown:
        print(f"posenc: error: no family with a rotary embedding or a relative bias named "
              f"{', '.join(unknown)} in {observer.transformers_root()}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    verdicts = sweep(args.family, lambda name: print(f"sweeping {name} ...", file=sys.stderr,
                                                      flush=True))
    seconds = time.perf_counter() - start
    for v in verdicts:
        print(f"{v.family:32s} {v.verdict:14s} {v.profile or '':13s} "
              f"{v.max_abs:9.2e} {v.reason}")
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.verdict] = counts.get(v.verdict, 0) + 1
    print(f"{len(verdicts)} families in {seconds:.0f} s: "
          + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    versions = observer.versions()
    if args.json:
        Path(args.json).write_text(json.dumps({
            "versions": versions, "seconds": seconds,
            "families": [v.as_dict() for v in verdicts]}, indent=1), encoding="utf-8")
    if not args.family:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(markdown(verdicts, versions=versions, seconds=seconds),
                        encoding="utf-8")
        print(f"wrote {path}")
    return 0
