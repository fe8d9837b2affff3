"""Porting bugs users reported to the trackers of peer projects, each planted in the NumPy
backend by overriding the public functions it touches (the harness must fail every one).

Every mutant cites the thread it was written from (``owner/repo#number``) in ``cite``; none
comes from posenc's own history. Schedule bugs patch ``rope_frequencies._SCHEDULES`` for the
duration of one call, so ``rope``, ``rope_frequencies`` and ``mrope`` all see the same bug.
One module per kind of bug; ``MUTANTS`` lists them all.
"""

from __future__ import annotations

from . import alibi, rope_geometry, rope_scaling, sinusoidal, t5
from .registry import TrackerMutant

MUTANTS: list[TrackerMutant] = [*alibi.MUTANTS, *rope_geometry.MUTANTS, *rope_scaling.MUTANTS,
                                *t5.MUTANTS, *sinusoidal.MUTANTS]

__all__ = ["MUTANTS", "TrackerMutant"]
