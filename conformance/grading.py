"""Grading a check against the precision profiles: the tightest one it meets, and its status
under the profile the run asked for."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .tolerances import PROFILES

GRADED_KINDS = ("case", "property")  # gradient checks have tolerances of their own


def graded(run: Callable[[str], Any], chosen: str, kind: str,
           differs: Callable[[str, str], bool]) -> Any:
    """Run a check (``run(profile) -> Result``) under ``exact``, then, while it fails, under
    each looser profile whose tolerance ``differs`` from the last one run. The result is the
    run under ``chosen`` (the failure under ``chosen`` when it fails there), with ``grade``: the
    tightest profile passed, None when none is (or the check errored or was unsupported)."""
    results = {PROFILES[0]: run(PROFILES[0])}
    last = PROFILES[0]
    grade = PROFILES[0] if results[last].status == "pass" else None
    if kind in GRADED_KINDS and results[last].status == "fail":
        for profile in PROFILES[1:]:
            if not differs(last, profile):
                results[profile] = results[last]  # the same tolerance: the same outcome
                continue
            results[profile] = run(profile)
            last = profile
            if results[profile].status == "pass":
                grade = profile
                break
    if grade is not None and PROFILES.index(grade) <= PROFILES.index(chosen):
        result = results[grade]
    else:  # fails under the chosen profile: report that failure
        result = results.get(chosen) or results[last]
    result.grade = grade
    if grade not in (None, PROFILES[0]) and result.status == "pass":
        result.message = f"passes the {grade} profile, not exact"
        missed = PROFILES[PROFILES.index(grade) - 1]  # why it misses the next profile up
        result.details.setdefault("tighter", {
            "profile": missed, "message": results[missed].message.split("\n")[0],
            "diagnosis": results[missed].details.get("diagnosis")})
    return result
