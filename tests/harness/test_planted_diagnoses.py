"""Every declared diagnosis, planted as an implementation's output on every golden case, meets
no precision profile, except where it cannot be seen: identical to the golden within the exact
tolerance (position 0, a parameter the case does not exercise), not judgeable under the profile
(its tolerance reaches a tenth of the data), or a change smaller than that tenth which the
profile's admitted arithmetic could make too (bfloat16 angles under ``reduced``). Those
exceptions are counted and printed. No backend runs: the diagnoses are the NumPy reference's
outputs, compared with the goldens as the harness compares a backend's (rotary outputs under the
conventional profile element by element, conformance/rotary_bound.py)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from posenc.backends.pairing import pairing_layouts
from posenc.catalog import specs
from posenc.conformance import rotary_bound
from posenc.conformance.case_scale import case_scale
from posenc.conformance.diagnose import Diagnoser
from posenc.conformance.tolerances import JUDGEABLE, PROFILES, compare, for_spec
from posenc.golden import load

DTYPES = ("float32",)  # the dtype the profiles are about (16-bit ones only add rounding)


def _planted() -> list[tuple[str, str, str, dict[str, dict[str, Any]]]]:
    """(spec, case, diagnosis, {dtype: {profile: outcome}}) for every float-valued case a
    diagnosis can be evaluated on; outcome is 'pass', 'fail' or 'unjudgeable', with the
    diagnosis's largest change relative to the data's magnitude."""
    diagnoser = Diagnoser()
    rows = []
    for spec in specs().values():
        if not spec.diagnoses or spec.output_kind == "int":  # integers: compared exactly
            continue
        for case in load(spec).cases.values():
            scale = case_scale(spec, case)
            for diagnosis in spec.diagnoses:
                out = diagnoser.output(spec, case, diagnosis)
                if out is None:
                    continue
                grades: dict[str, dict[str, Any]] = {}
                for dtype in DTYPES:
                    grades[dtype] = {}
                    for profile in PROFILES:
                        tol = for_spec(spec, dtype, profile)
                        c = compare(out, case.output, tol, scale=scale,
                                    angle_bound=case.angle_bound,
                                    bound=rotary_bound.for_case(spec, case, tol))
                        grades[dtype][profile] = (
                            "fail" if not c.ok else "pass" if c.judgeable else "unjudgeable")
                        grades[dtype]["change"] = c.max_abs / c.magnitude if c.magnitude else 0
                rows.append((spec.id, case.name, diagnosis.name, grades))
    return rows


@pytest.fixture(scope="module")
def planted() -> list[tuple[str, str, str, dict[str, dict[str, Any]]]]:
    return _planted()


def test_no_planted_diagnosis_meets_a_profile_it_changes_visibly(planted: list[Any]) -> None:
    exceptions: Counter[str] = Counter()
    offenders = []
    for spec_id, case, name, grades in planted:
        for dtype, outcome in grades.items():
            if outcome["exact"] == "pass":
                exceptions["invisible: within the exact tolerance"] += 1
                continue
            for profile in PROFILES[1:]:
                if outcome[profile] == "unjudgeable":
                    exceptions[f"not judgeable under {profile}"] += 1
                    break
                if outcome[profile] != "pass":
                    continue
                if outcome["change"] < JUDGEABLE:  # below what the profile can resolve
                    exceptions[f"below {profile}'s resolution ({name})"] += 1
                else:
                    offenders.append((spec_id, case, name, dtype, profile, outcome["change"]))
                break
    print("\nplanted diagnoses: exceptions to 'meets no profile'")
    for what, n in sorted(exceptions.items()):
        print(f"  {n:5d}  {what}")
    assert not offenders, offenders
    assert len(planted) > 500


def test_a_swapped_layout_never_passes_at_long_positions(planted: list[Any]) -> None:
    """Issue 29's false pass: layout-swapped rope met the reduced profile at position 4095 and
    near 2^17 (23 golden cases). Now it fails or is not judgeable there, never a pass."""
    swapped = [(case, g) for spec_id, case, name, g in planted
               if spec_id == "rope" and name == "interleaved_for_half"]
    assert swapped
    for case, grades in swapped:
        for dtype, outcome in grades.items():
            if outcome["exact"] != "pass":
                assert "pass" not in [outcome[p] for p in PROFILES], (case, dtype, outcome)
    blind = {case for case, g in swapped if g["float32"]["reduced"] == "unjudgeable"}
    assert {"near_2_17", "near_2_20_llama3"} <= blind, blind


def test_every_converted_layout_has_a_planted_layout_swap(planted: list[Any]) -> None:
    """Each encoding whose pairing or column layout posenc converts (issue 45) names a swapped
    one "layout swapped", and that diagnosis, planted, fails every profile on some golden case
    (MLA's de-interleave has its own names: checkpoint interleave not undone)."""
    converted = {s.id for s in specs().values()
                 if pairing_layouts(s.function) and s.id != "mla_rope"}
    assert {"pixtral_rope", "llama4_vision_rope", "mrope", "sinusoidal", "rope"} <= converted
    swaps = {s.id: {d.name for d in s.diagnoses if d.title == "layout swapped"}
             for s in specs().values() if s.id in converted}
    assert all(swaps.values()), swaps
    seen: dict[str, set[str]] = {spec_id: set() for spec_id in converted}
    for spec_id, _case, name, grades in planted:
        if name in swaps.get(spec_id, ()) and all(
                grades["float32"][p] == "fail" for p in PROFILES):
            seen[spec_id].add(name)
    assert seen == swaps, (seen, swaps)
