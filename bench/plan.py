"""The plan of a run: which suites there are, and the cases of the chosen ones in table order."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from .rows import BenchCase
from .sizes import QUICK, Sizes
from .suites import alibi, decode, gpu, rope_torch, rope_xla, sinusoidal, t5

SUITES = ("rope", "absolute", "bias", "gpu")  # gpu: --device cuda only


def _rope(sizes: Sizes) -> list[BenchCase]:
    cases = []
    for seq in sizes.seqs:
        cases += [rope_torch.case(sizes, seq), rope_xla.case(sizes, seq)]
    return cases + [decode.case(sizes, offset) for offset in sizes.offsets]


# suite -> its cases, in the order the table prints them
REGISTRY: tuple[tuple[str, Callable[[Sizes], list[BenchCase]]], ...] = (
    ("rope", _rope),
    ("absolute", lambda sizes: [sinusoidal.case(sizes)]),
    ("gpu", lambda sizes: gpu.cases(quick=sizes is QUICK)),
    ("bias", lambda sizes: [t5.case(sizes), alibi.case(sizes)]),
)


def plan(sizes: Sizes, suites: Sequence[str]) -> list[BenchCase]:
    return [case for suite, cases in REGISTRY if suite in suites for case in cases(sizes)]


def suites_of(args: argparse.Namespace) -> tuple[str, ...]:
    """The suites ``--suite`` names; ``all`` is every suite (gpu only with --device cuda)."""
    if "all" not in args.suite:
        return tuple(args.suite)
    return tuple(s for s in SUITES if s != "gpu" or args.device == "cuda")
