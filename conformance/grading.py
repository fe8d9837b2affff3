"""Grading a check against the precision profiles: the tightest one it meets, and its status
under the profile the run asked for.

A check whose errors stay within a profile's tolerance only because that tolerance reaches a
tenth of the data's magnitude (``details["not_judgeable"]``, see :mod:`.tolerances`) is
``unjudgeable`` under that profile: not a pass, and no grade. The looser profiles are
unjudgeable too (their tolerances only grow), so grading stops there."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .tolerances import PROFILES, element_summary

GRADED_KINDS = ("case", "property")  # gradient checks have tolerances of their own
UNJUDGEABLE = "unjudgeable"  # the status of a check its profile cannot judge


def unjudgeable(result: Any) -> bool:
    """A failure that is only the profile's own limit: every error within its tolerance, but
    the tolerance reaches a tenth of the data's magnitude."""
    record = result.details.get("not_judgeable")
    return result.status == "fail" and bool(record) and bool(record.get("errors_within"))


def _mark(result: Any, profile: str) -> Any:
    if unjudgeable(result):
        result.status = UNJUDGEABLE
        result.details["not_judgeable"]["profile"] = profile
        first, _, rest = result.message.partition("\n")
        result.message = "\n".join(
            [f"not judgeable under the {profile} profile: {first}", *rest.splitlines()])
    return result


def graded(run: Callable[[str], Any], chosen: str, kind: str,
           differs: Callable[[str, str], bool]) -> Any:
    """Run a check (``run(profile) -> Result``) under ``exact``, then, while it fails, under
    each looser profile whose tolerance ``differs`` from the last one run. The result is the
    run under ``chosen`` (the failure under ``chosen`` when it fails there, ``unjudgeable``
    where its tolerance judges nothing), with ``grade``: the tightest profile passed, None when
    none is (or the check errored, was unsupported or could not be judged)."""
    results = {PROFILES[0]: _mark(run(PROFILES[0]), PROFILES[0])}
    last = PROFILES[0]
    grade = PROFILES[0] if results[last].status == "pass" else None
    if kind in GRADED_KINDS and results[last].status == "fail":
        for profile in PROFILES[1:]:
            if results[last].status == UNJUDGEABLE or not differs(last, profile):
                results[profile] = results[last]  # the same (or a looser, blinder) outcome
                continue
            results[profile] = _mark(run(profile), profile)
            last = profile
            if results[profile].status == "pass":
                grade = profile
                break
    if grade is not None and PROFILES.index(grade) <= PROFILES.index(chosen):
        result = results[grade]
    else:  # fails, or cannot be judged, under the chosen profile: report that
        result = results.get(chosen) or results[last]
        if result.status == UNJUDGEABLE and (tighter := _tighter_failure(results, chosen)):
            result.message += f"\nfails the {tighter[0]} profile: {tighter[1]}"
    blind = [p for p in PROFILES[PROFILES.index(chosen) + 1:]
             if p in results and results[p].status == UNJUDGEABLE]
    if result.status == "fail" and blind:
        result.details.setdefault("not_judgeable_under", blind[0])
        result.message += (f"\n(not judgeable under the {blind[0]} profile: its tolerance "
                           f"reaches a tenth of the data's magnitude)")
    result.grade = grade
    if grade not in (None, PROFILES[0]) and result.status == "pass":
        result.message = (f"passes the {grade} profile, not exact"
                          f"{element_summary(result.details.get('elements'))}")
        missed = PROFILES[PROFILES.index(grade) - 1]  # why it misses the next profile up
        result.details.setdefault("tighter", {
            "profile": missed, "message": results[missed].message.split("\n")[0],
            "diagnosis": results[missed].details.get("diagnosis")})
    return result


def _tighter_failure(results: dict[str, Any], chosen: str) -> tuple[str, str] | None:
    """The loosest profile tighter than ``chosen`` that the check fails, and why."""
    for profile in reversed(PROFILES[: PROFILES.index(chosen)]):
        r = results.get(profile)
        if r is not None and r.status == "fail":
            return profile, r.message.split("\n")[0]
    return None
