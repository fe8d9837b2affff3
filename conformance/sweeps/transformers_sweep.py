"""``posenc sweep transformers``: every transformers model family with a rotary embedding or a
relative/ALiBi bias, checked from its own config against posenc's float64 functions, with a
verdict per family; ``docs/families.md`` is generated from one full run.

What a family computes is observed by :mod:`posenc.conformance.sweeps.transformers_families` (a
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

Freshness: the page records a hash of the sweep's code (``SWEEP_MODULES`` and the observer's
``OBSERVER_MODULES``) and the transformers version; ``posenc sweep transformers
--check`` and the docs test recompute it without running the sweep.
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
from pathlib import Path
from typing import Any

import numpy as np

import posenc
from posenc.errors import PosencError

from ..reports.scoreboard import HASH_LINE, freshness_exit, recorded_hash
from .transformers_checks import NOT_ROTATED, UNKNOWN_TYPE, check_biases, check_tables, check_wiring
from .transformers_reading import POSENC_TYPES, Finding, LayerRope, Verdict, expected_layers, loosest
from .transformers_reading import grade as grade  # the sweep's grading, for its tests

MARKDOWN = "families.md"
# the sweep's code, whose hash the page records
SWEEP_MODULES = ("transformers_sweep.py", "transformers_reading.py", "transformers_checks.py")
OBSERVER_MODULES = ("transformers_families.py", "transformers_observation.py",
                    "transformers_configs.py", "transformers_biases.py")
# the representative families CI runs (tests/peers/test_family_sweep.py)
REPRESENTATIVE = ("llama", "gptj", "gpt_neox", "phi3", "gemma3", "qwen2_vl", "deepseek_v3",
                  "cohere", "bloom", "t5")


# -- one family ----------------------------------------------------------------------------------
# divergences adjudicated by hand, with their evidence: (family, diagnosis substring) ->
# (adjudication, explanation); tests/peers/test_family_sweep.py holds the independent evidence
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


def _decide(verdict: Verdict, findings: list[Finding], model_type: str) -> None:
    """``verdict``'s verdict, profile and reason from its findings."""
    failed = [f for f in findings if f.grade is None]
    unrotated = {f.what.split("(")[-1].rstrip(")") for f in failed if f.note == NOT_ROTATED}
    if failed and len(unrotated) == 1 and all(f.note == NOT_ROTATED for f in failed):
        # every rotation recorded conforms; one layer type is left unrotated: a NoPE
        # schedule (Cohere2's, Llama 4's kind) that posenc's layer_schedule has no rule for
        verdict.verdict = "spec gap"
        verdict.profile = loosest(f.grade for f in findings if f.grade is not None)
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
        verdict.profile = loosest(f.grade for f in findings)
        verdict.reason = "; ".join(dict.fromkeys(f.note for f in findings if f.note))


def judge(obs: Any) -> Verdict:
    """The verdict on one observation."""
    verdict = Verdict(obs.family, "")
    findings: list[Finding] = []
    layers: list[LayerRope] = []
    adjusted: list[str] = []
    text = obs.unrotated
    if text and text["wiring"].startswith("recorded") and ";" not in text["wiring"] and \
            text["rotary_calls"] == 0 and text["apply_calls"] == 0 and text["layers"]:
        # run, and nothing rotated: a model without rope, observed
        return Verdict(obs.family, "no rope", checked=["wiring"], reason=(
            f"{text['config_class']}'s model ({text['layers']} layers) ran a left-padded "
            "prefill and a KV-cache decode step calling no rotary module and no "
            f"apply_rotary*: no rope is applied (qk_rope_head_dim "
            f"{text.get('qk_rope_head_dim')}: the slice is carried unrotated)"))
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
    _decide(verdict, findings, obs.config.get("model_type", obs.family))
    extra = []
    if "wiring" not in verdict.checked and obs.config:
        why = obs.problems.get("forward") or obs.wiring
        if not obs.calls and obs.wiring.startswith("recorded") and ";" not in obs.wiring:
            why = (f"the forward (prefill and decode) called no {obs.wiring[9:]}: no rope is "
                   "applied with this config")
        extra.append(f"wiring not checked: {why}")
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
    from . import transformers_families as observer

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
    here = Path(__file__).parent
    digest = hashlib.sha256()
    home = Path(posenc.__file__).parent  # what it checks: the reader and the layer schedules
    readers = (home / "dialects" / "transformers.py", home / "encodings" / "layer_schedule.py")
    for file in (*(here / name for name in (*SWEEP_MODULES, *OBSERVER_MODULES)), *readers):
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
        "against posenc's float64 functions; and every family whose attention has an MLA rope "
        "slice (`qk_rope_head_dim`) but no text rotary class, whose text model is run to see "
        "whether anything rotates (**no rope**: nothing did). Where a config class rejects "
        "the shrunk sizes, they are made consistent by the error it raises. Layers that a "
        "family leaves unrotated are judged by `posenc.layer_schedule`'s rule for it. "
        "Generated by `posenc sweep transformers` from "
        "one run; do not edit by hand. How each family is checked: "
        "[`conformance/sweeps/transformers_sweep.py`](../conformance/sweeps/transformers_sweep.py).", "",
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


# -- the command (its options: .command.add_arguments) -----------------------------------------
def main_args(args: argparse.Namespace) -> int:
    path = Path(args.out) / MARKDOWN
    if args.check:
        return freshness_exit(check(path), path)
    from . import transformers_families as observer

    if problem := observer.unknown_families(args.family):
        print(problem, file=sys.stderr)
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
