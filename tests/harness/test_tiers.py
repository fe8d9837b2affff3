"""The standard tier (the CLI's default) against the full plan: every backend × dtype × mode ×
encoding group stays, the groups where the mutant suites catch porting bugs stay whole, and
the tier is a deterministic subset."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from posenc.conformance import Options, plan
from posenc.errors import ParameterError


def _groups(checks: list) -> set[tuple[str, ...]]:
    return {(c.backend, c.device, c.dtype, c.mode, c.encoding) for c in checks}


@pytest.fixture(scope="module")
def plans() -> tuple[list, list]:
    backends = ["numpy", "strict", "torch", "torch-layers"]
    full = plan(Options(backends=backends))
    standard = plan(Options(backends=backends, tier="standard"))
    return full, standard


def test_standard_keeps_every_group_and_is_a_subset(plans: tuple[list, list]) -> None:
    full, standard = plans
    assert _groups(standard) == _groups(full)
    ids = {c.id for c in full}
    assert all(c.id in ids for c in standard)
    assert len(standard) < len(full)
    # compiled groups: one golden case each, no property
    compiled = [c for c in standard if c.mode == "compiled" and c.kind != "capability"]
    assert all(c.kind == "case" for c in compiled)
    assert len(compiled) == len(_groups(compiled))
    assert [c.id for c in standard] == [c.id for c in plan(
        Options(backends=["numpy", "strict", "torch", "torch-layers"], tier="standard"))]


def test_eager_float64_and_float32_array_backends_run_whole(plans: tuple[list, list]) -> None:
    """Where tests/test_harness_catches_*mutants.py plant their bugs (eager, float64/float32,
    array backends): the standard tier drops nothing, so it catches what they catch."""
    full, standard = plans
    kept = {c.id for c in standard}
    whole = [c for c in full if c.mode == "eager" and c.dtype in ("float64", "float32")
             and c.backend in ("numpy", "strict", "torch")]
    assert whole and all(c.id in kept for c in whole)


def test_every_gradient_check_and_first_compiled_case_stays(plans: tuple[list, list]) -> None:
    full, standard = plans
    kept = {c.id for c in standard}
    assert all(c.id in kept for c in full if c.kind == "gradient")
    first = {}
    for c in full:
        if c.kind == "case" and c.mode == "compiled":
            first.setdefault((c.backend, c.dtype, c.encoding), c.id)
    assert set(first.values()) <= kept


def test_an_unknown_tier_is_an_error() -> None:
    with pytest.raises(ParameterError, match="tier='quick' is not one of standard, exhaustive"):
        plan(Options(backends=["numpy"], tier="quick"))


def test_the_cli_runs_the_standard_tier_by_default(tmp_path) -> None:
    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "posenc", "conformance", "--backend", "numpy", "--encoding",
           "alibi_slopes", "--dtype", "float16", "--json", str(out), "-q"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    standard = json.loads(out.read_text())
    subprocess.run([*cmd, "--exhaustive"], check=True, capture_output=True, text=True)
    exhaustive = json.loads(out.read_text())
    assert len(standard["results"]) == len(plan(Options(
        backends=["numpy"], encodings=["alibi_slopes"], dtypes=["float16"], tier="standard")))
    assert len(standard["results"]) < len(exhaustive["results"])
    assert {r["kind"] for r in exhaustive["results"]} - {r["kind"] for r in standard["results"]} \
        == {"property"}
