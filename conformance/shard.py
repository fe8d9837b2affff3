"""Splitting a conformance plan: groups of checks, their estimated cost, and ``--shard K/N``.

A *group* is every check of one (backend, device, dtype, mode, encoding): the checks that share
a compiled-function cache, so a group never leaves its shard or its worker. A shard is a
deterministic, cost-balanced set of groups (largest group first onto the lightest shard); the
N shards of one plan are disjoint and together are the plan. Every machine of a CI matrix must
therefore plan the same checks (same options, same installed backends).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from posenc.errors import ParameterError

from .runner import Check

GroupKey = tuple[str, str, str, str, str]

# Seconds per check on a 2-core CPU machine, cold caches, 25 Hypothesis examples, for
# balancing shards and the ETA (which scales these by the measured rate), rounded means
# (benchmarks/README.md, 2026-11-27): cases and gradients from a cold standard-tier run (every
# group, 9,760 checks), properties from every JAX and TensorFlow property of the exhaustive
# plan and, for torch, from an exhaustive sixty-fourth of it. Keyed by backend, then by
# framework family for backends wrapping a known one; unknown backends get _DEFAULT.
_MEASURED: dict[tuple[str, str], dict[str, float]] = {
    ("numpy", "eager"): {"case": 0.01, "property": 0.05, "gradient": 0.05},
    ("torch", "eager"): {"case": 0.005, "property": 0.13, "gradient": 0.01},
    ("torch", "compiled"): {"case": 2.8, "property": 9.0},
    ("torch-layers", "compiled"): {"case": 4.0, "property": 4.5},
    ("jax", "eager"): {"case": 0.13, "property": 0.78, "gradient": 0.5},
    ("jax", "compiled"): {"case": 0.14, "property": 0.7},
    ("jax-layers", "eager"): {"case": 0.41, "property": 2.25, "gradient": 1.1},
    ("jax-layers", "compiled"): {"case": 0.19, "property": 1.5},
    ("tensorflow", "eager"): {"case": 0.015, "property": 0.19, "gradient": 0.22},
    ("tensorflow", "compiled"): {"case": 0.135, "property": 0.8},
    ("keras-layers", "compiled"): {"case": 0.16, "property": 0.4},
}
_DEFAULT = {"eager": {"case": 0.05, "property": 0.3, "gradient": 0.1},
            "compiled": {"case": 2.5, "property": 4.0, "gradient": 2.5}}
# Which framework a built-in backend runs on: one worker process holds one framework only
# (array-api-strict wraps NumPy, so they share workers and save a process start).
_FAMILIES = {"torch-layers": "torch", "torch-triton": "torch", "jax-layers": "jax",
             "keras-layers": "tensorflow", "strict": "numpy"}


def family(backend: str) -> str:
    """The framework family of a backend name (a backend of its own when unknown)."""
    return _FAMILIES.get(backend, backend)


def group_key(check: Check) -> GroupKey:
    return (check.backend, check.device, check.dtype, check.mode, check.encoding)


def check_cost(check: Check, max_examples: int = 25) -> float:
    """Estimated seconds for one check (capability checks cost nothing)."""
    if check.kind == "capability":
        return 0.0
    table = (_MEASURED.get((check.backend, check.mode))
             or _MEASURED.get((family(check.backend), check.mode)) or _DEFAULT[check.mode])
    seconds = table.get(check.kind, _DEFAULT[check.mode].get(check.kind, 0.5))
    if check.kind == "property":
        share = max(max_examples, 1) / 25
        # compiled properties pay mostly for compilations, which fewer examples barely reduce
        seconds *= share if check.mode == "eager" else 0.5 + 0.5 * share
    return seconds


def groups(checks: Sequence[Check]) -> list[list[int]]:
    """Indices into ``checks`` grouped by :func:`group_key`, groups in order of first appearance."""
    found: dict[GroupKey, list[int]] = {}
    for i, check in enumerate(checks):
        found.setdefault(group_key(check), []).append(i)
    return list(found.values())


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` (1 <= K <= N) as (K, N); anything else is a ParameterError naming the value."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if not match:
        raise ParameterError(f"--shard {text!r}: expected K/N, e.g. 1/4 (shard K of N)")
    k, n = int(match[1]), int(match[2])
    if n < 1:
        raise ParameterError(f"--shard {text!r}: the number of shards N must be at least 1")
    if not 1 <= k <= n:
        raise ParameterError(f"--shard {text!r}: K must be between 1 and N={n} (shards count "
                             "from 1)")
    return k, n


def assign(checks: Sequence[Check], n: int, max_examples: int = 25) -> list[int]:
    """The shard (0-based) of every check: whole groups, greedily balanced by estimated cost."""
    loads = [0.0] * n
    shard_of = [0] * len(checks)
    members = groups(checks)
    costs = [sum(check_cost(checks[i], max_examples) for i in g) for g in members]
    # largest first; ties by plan position, so every machine computes the same split
    for g in sorted(range(len(members)), key=lambda g: (-costs[g], members[g][0])):
        target = min(range(n), key=lambda s: (loads[s], s))
        loads[target] += costs[g]
        for i in members[g]:
            shard_of[i] = target
    return shard_of


def select(checks: Sequence[Check], k: int, n: int, max_examples: int = 25) -> list[Check]:
    """Shard ``k`` of ``n`` (1-based) of a plan, in plan order."""
    shard_of = assign(checks, n, max_examples)
    return [c for c, s in zip(checks, shard_of, strict=True) if s == k - 1]
