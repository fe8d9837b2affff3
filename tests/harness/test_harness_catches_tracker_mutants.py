"""Porting bugs reported to peer projects' trackers (tests/mutants/tracker/) must each fail
the harness: NumPy float64 and float32, eager, golden cases and properties.

Catch rate when this set was written: 37 of 37 (100%). Before the cases and the property
added with it, six were caught by a single check each (an explicit YaRN attention factor,
YaRN betas, the YaRN correction-range clamp, dynamic NTK below the trained length, LongRoPE's
switch by token count, the llama3 middle-band blend); each now has a golden case or property
of its own."""

from __future__ import annotations

import re

import pytest

from posenc.conformance import Options, run

from ..mutants.tracker import MUTANTS

CITATION = re.compile(r"^[\w.-]+/[\w.-]+#\d+: \S.*$")


def failing_checks(mutant) -> set[str]:
    options = Options(backends=[mutant.backend], dtypes=["float64", "float32"], modes=["eager"],
                      max_examples=3, encodings=list(mutant.encodings), gradients=False)
    return {f"{r.check.dtype}/{r.check.encoding}/{r.check.kind}:{r.check.name}"
            for r in run(options) if r.failed}


def test_the_set_is_fresh_large_and_cited() -> None:
    assert len(MUTANTS) >= 30
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)
    for mutant in MUTANTS:
        assert CITATION.match(mutant.cite), mutant.cite
        assert "\n" not in mutant.cite


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_tracker_mutant_is_caught(mutant) -> None:
    assert failing_checks(mutant), f"{mutant.name} ({mutant.cite}) passed every check"
