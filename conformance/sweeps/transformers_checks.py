"""The checks of one observed family (``posenc sweep transformers``): its recorded
``apply_rotary*`` calls (wiring), its rotary module's frequencies and cos/sin tables, and its
ALiBi / T5 biases, each a :class:`~posenc.conformance.sweeps.transformers_reading.Finding` graded against
posenc's float64 functions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import posenc
from posenc.errors import PosencError

from ..tolerances import PROFILES
from .transformers_reading import (
    LAYOUTS,
    Finding,
    LayerRope,
    best_pairing,
    grade,
    loosest,
    rotary_width,
    rotate,
    seq_len_for,
)

NOT_ROTATED = "no rotation recorded on a layer posenc reads as rotated"
UNKNOWN_TYPE = "rotates a layer of a type posenc's reader does not know:"


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
    from .transformers_families import (
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
        for n, (x_in, x_out) in enumerate(call["pairs"]):
            x = _bhsd(x_in, *pos.shape)
            y = _bhsd(x_out, *pos.shape)
            what = f"layer {idx} {phase} {'qk'[n] if n < 2 else n} ({call['function']})"
            if x is None or y is None or x.shape != y.shape:
                findings.append(Finding("wiring", what, None, float("inf"),
                                        f"unexpected shapes {x_in.shape} -> {x_out.shape}"))
                continue
            rotated_layers.add(idx)
            finding, layout = _call_finding(x, y, pos, layers[idx], layers, what)
            findings.append(finding)
            if layout is not None:
                pairings.add(layout)
    for i, layer in enumerate(layers):
        if layer.scaling is not None and i not in rotated_layers and rotated_layers and \
                "forward" not in obs.problems and layer.attention:
            findings.append(Finding("wiring", f"layer {i} ({layer.layer_type})", None,
                                    float("inf"), NOT_ROTATED, "layer_types / no_rope_layers"))
    return findings, "/".join(sorted(pairings))


def _call_finding(x: np.ndarray, y: np.ndarray, pos: np.ndarray, layer: LayerRope,
                  layers: list[LayerRope], what: str) -> tuple[Finding, str | None]:
    """One recorded rotation ``x -> y`` against posenc's reading of its layer, and the pairing
    it conforms in (None: it does not, or the layer has no rope)."""
    scale = max(float(np.max(np.abs(x))), 1e-30)
    if not layer.attention:
        g, err, _ = grade(y, x, scale=scale, angle_bound=0.0)
        return Finding("wiring", what, g, err, "" if g else
                       f"{UNKNOWN_TYPE} {layer.layer_type!r}", "" if g else "layer_types"), None
    if layer.scaling is None:
        g, err, _ = grade(y, x, scale=scale, angle_bound=0.0)
        return Finding("wiring", what, g, err,
                       "" if g else "rotates a layer posenc reads as NoPE",
                       "" if g else "layer_types / no_rope_layers"), None
    if x.shape[-1] not in (layer.head_dim, rotary_width(layer)):
        return Finding(
            "wiring", what, None, float("inf"),
            f"rotates a slice of {x.shape[-1]} features; posenc reads a head of "
            f"{layer.head_dim} with {rotary_width(layer)} rotated", "partial_rotary_factor"), None
    bound = float(np.max(np.abs(pos)))
    g, err, layout = _best_layout(x, y, pos, layer, scale, bound)
    if g is not None:
        return Finding("wiring", what, g, err, "", ""), layout
    note, where = _diagnose(y, scale, bound, _alternatives(layer, x, pos, layout, layers))
    if not note and layer.declared:
        for other in LAYOUTS:
            if other != layer.declared and grade(
                    y, rotate(x, pos, layer, other), scale=scale, angle_bound=bound)[0]:
                note = f"pairs as {other!r} where the config declares {layer.declared!r}"
                where = "rope_interleave"
                break
    return Finding("wiring", what, g, err, note, where), None


def _best_layout(x: np.ndarray, y: np.ndarray, pos: np.ndarray, layer: LayerRope,
                 scale: float, bound: float) -> tuple[str | None, float, str]:
    """``(grade, max abs error, layout)`` of the pairing that fits ``y`` best: the config's
    declared one, else the tightest-graded (or, with none graded, the closest) of all."""
    layouts = [layer.declared] if layer.declared else list(LAYOUTS)
    return best_pairing(x, y, pos, layer, layouts, scale=scale, angle_bound=bound)[:3]


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
        seq_len = seq_len_for(scaling, pos)
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
                f"(head_dim {layer.head_dim}, rotary width {rotary_width(layer)})",
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
            g = loosest(grades)
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
                       f"frequencies (head_dim {layer.head_dim}, rotary width {rotary_width(layer)})",
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
