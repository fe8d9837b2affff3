"""An engine sweep's verdict on one family's observation: every rotation the engine computed
against posenc's float64 rotation of that layer (:mod:`.engine_report`), in the pairing the
transformers sweep found for the family, and the divergences named by the misreading they
match. Shared by the engine sweeps (:mod:`.mlx_lm`, :mod:`.vllm`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .engine_report import EngineRow, diagnose, fit
from .transformers_reading import LAYOUTS, Finding, LayerRope, expected_layers, grade, loosest

# (family or "*", diagnosis substring or substrings) -> the adjudication of that divergence
Adjudicated = dict[tuple[str, "str | tuple[str, ...]"], str]


def _positions(call: dict[str, Any]) -> np.ndarray:
    x = call["x"]
    offset = np.asarray(call["offset"], dtype=np.int64).reshape(-1)
    return (offset[:, None] + np.arange(x.shape[-2])[None, :]).repeat(
        x.shape[0] // max(len(offset), 1) or 1, 0)[: x.shape[0]]


def allowed(pairings: tuple[str, ...]) -> tuple[str, ...]:
    """The pairings equivalent to the family's: DeepSeek's de-interleave rotates the same
    pairs (2i, 2i+1) as the interleaved pairing and only writes them in another order, the same
    for q and k, so the attention scores are equal."""
    extra = {"deinterleave": "interleaved", "interleaved": "deinterleave"}
    return tuple(dict.fromkeys([*pairings, *(extra[p] for p in pairings if p in extra)]))


def _finding(call: dict[str, Any], layer: LayerRope, pairings: tuple[str, ...], part: str,
             what: str, bases: tuple[float, ...] = ()) -> tuple[Finding | None, str | None]:
    """The graded call and the pairing it fits (finding None: float32 cannot be judged
    at these positions; ``bases``: the engine's default rope_theta, for the diagnosis)."""
    x, y = call["x"], call["y"]
    if x.ndim != 4 or x.shape != y.shape:
        return Finding(part, what, None, float("inf"), f"shapes {x.shape} -> {y.shape}"), None
    pos = np.broadcast_to(_positions(call), (x.shape[0], x.shape[2]))
    dims = call.get("dims")
    if layer.scaling is not None and x.shape[-1] != layer.head_dim and dims and \
            dims < x.shape[-1]:
        # the engine rotates part of a head of another width than posenc's reading: a size
        # the model code derives otherwise (RecurrentGemma: hidden / heads), or a rope part
        # inside a wider head (DeepSeek-V3.2's indexer: qk_rope_head_dim of index_head_dim).
        # posenc's reading of that head: the partial factor of it, else the rope part's width
        partial = (layer.scaling or {}).get("partial_rotary_factor") not in (None, 1.0)
        layer = LayerRope(x.shape[-1], layer.scaling,
                          layer.rotary_dim or (None if partial else layer.head_dim),
                          layer.layer_type, layer.declared)
    if layer.scaling is None:
        g, err, _ = grade(y, x, scale=max(float(np.max(np.abs(x))), 1e-30), angle_bound=0.0)
        return Finding(part, what, g, err, "" if g else "rotates a layer posenc reads as NoPE",
                       "" if g else "layer_types / no_rope_layers"), None
    g, err, pairing, judged = fit(x, y, pos, layer, allowed(pairings))
    if not judged:
        return None, None
    if g is not None:
        return Finding(part, what, g, err), pairing
    other = fit(x, y, pos, layer)
    if other[0] is not None:
        return Finding(part, what, None, err, f"pairs as {other[2]!r} where transformers pairs "
                       f"as {'/'.join(pairings)!r}", "traditional"), None
    note, where = "", ""
    for candidate in dict.fromkeys([pairing, *allowed(pairings)]):  # the closest fit first
        note, where = diagnose(x, y, pos, layer, candidate, bases)
        if note:
            break
    return Finding(part, what, None, err, note or "no reading posenc knows matches", where), None


def judge(engine: str, adjudicated: Adjudicated, family: str, obs: dict[str, Any],
          pairings: tuple[str, ...] = LAYOUTS,
          unrotated: frozenset[int] = frozenset()) -> EngineRow:
    """``engine``'s verdict on one observation: each rotation against posenc's float64
    rotation of its layer, in ``pairings`` (the transformers sweep's for the family), with the
    ``unrotated`` layers transformers' module leaves unrotated where posenc's reader has no
    rule; a divergence ``adjudicated`` names is marked settled.

    ``obs``: ``config`` (the family's config dict), ``layers``, ``calls`` (rotations recorded
    in the engine's forward: layer, phase, x, y [b, h, s, d] as float64, offset, dims),
    ``applied`` (each layer's module applied directly), ``forward`` ("" when the forward ran,
    else why not), optionally ``default_bases`` and ``apply_problems``; or ``unsupported``."""
    row = EngineRow(family, "not checkable", model_type=obs.get("model_type", ""),
                    architecture=obs.get("architecture", ""))
    if "unsupported" in obs:
        row.verdict = "not supported" if obs["unsupported"] else "not checkable"
        row.reason = obs.get("problem") or f"{engine}: {obs['unsupported']}"
        return row
    config = obs["config"]
    n = obs["layers"] or int(config.get("num_hidden_layers") or 0)
    layers, _ = expected_layers(config, n)
    for i in unrotated:  # transformers' module is the truth where posenc has a spec gap
        if i < len(layers):
            layers[i] = LayerRope(layers[i].head_dim, None, layer_type=layers[i].layer_type)
    findings: list[Finding] = []
    used: set[str] = set()
    unjudged: list[int] = []
    called = {c["layer"] for c in obs["calls"]}
    for part, calls in (("wiring", obs["calls"]), ("positions", obs["applied"])):
        for call in calls:
            i = call["layer"]
            if i >= len(layers) or not layers[i].attention:
                continue
            if part == "positions" and not obs["forward"] and i not in called:
                continue  # the forward ran and this layer never called the rope it holds
            finding, pairing = _finding(call, layers[i], pairings, part,
                                        f"layer {i} {call['phase']}",
                                        tuple(obs.get("default_bases", ())))
            if finding is None:
                unjudged.append(int(np.max(call["offset"])))
                continue
            findings.append(finding)
            used |= {pairing} if pairing else set()
    if not obs["forward"] and called:  # the forward ran and rotated: a layer that did not is
        # unrotated (no call at all: the model rotates in a way the recorder does not see)
        for i, layer in enumerate(layers):
            if layer.attention and layer.scaling is not None and i not in called:
                findings.append(Finding("wiring", f"layer {i}", None, float("inf"),
                                        "no rotation in the forward of a layer posenc reads "
                                        "as rotated", "layer_types / no_rope_layers"))
    if unjudged:
        obs = {**obs, "unjudged": min(unjudged)}
    _decide(row, findings, obs, used)
    adjudicate(row, adjudicated)
    return row


def _decide(row: EngineRow, findings: list[Finding], obs: dict[str, Any],
            used: set[str]) -> None:
    row.findings = findings
    row.pairing = "/".join(sorted(used))
    notes = [f"forward not run: {obs['forward']}"] if obs["forward"] else []
    notes += [f"layer {i}: {p}" for i, p in obs.get("apply_problems", {}).items()]
    if "unjudged" in obs:
        notes.append(f"positions {obs['unjudged']}+ not judgeable in float32")
    if not findings:
        row.reason = "; ".join(notes) or "no attention layer holds a rope module"
        return
    row.max_abs = max((f.max_abs for f in findings if np.isfinite(f.max_abs)), default=0.0)
    failed = [f for f in findings if f.grade is None]
    if failed:
        row.verdict = "diverges"
        groups: dict[tuple[str, str], list[str]] = {}
        for f in failed:
            groups.setdefault((f.note, f.field), []).append(f.what)
        notes = [f"{note}" + (f" [{where}]" if where else "") + f" ({', '.join(w[:3])}"
                 + (f" and {len(w) - 3} more" if len(w) > 3 else "") + ")"
                 for (note, where), w in groups.items()] + notes
    else:
        row.verdict = "conforms"
        row.profile = loosest(f.grade for f in findings)
    row.reason = "; ".join(notes)


def adjudicate(row: EngineRow, adjudicated: Adjudicated) -> None:
    """Mark ``row``'s divergence settled where ``adjudicated`` names it: (family or "*", a
    substring of the reason or substrings that must all be in it) -> the adjudication."""
    for (family, key), text in adjudicated.items():
        keys = (key,) if isinstance(key, str) else key
        if family in (row.family, "*") and all(k in row.reason for k in keys):
            row.adjudication = text
            return
