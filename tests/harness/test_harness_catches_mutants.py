"""The harness itself is tested: deliberately broken backends must fail it, a correct one pass."""

from __future__ import annotations

import pytest

from posenc.backends import get_backend
from posenc.catalog import specs

from ..conftest import TESTS, run_cli
from ..failing import failing_by_encoding
from ..mutants import overrides


def failing(backend, **kw) -> dict[str, set[str]]:
    """encoding -> names of the failing checks, running one backend object eagerly in float64."""
    return failing_by_encoding(backend, **kw)


@pytest.mark.slow
def test_the_unbroken_backend_passes() -> None:
    assert failing(get_backend("numpy")) == {}


@pytest.mark.parametrize(
    ("mutant", "broken"),
    [
        (overrides.OFF_BY_ONE, {"rope", "sinusoidal", "learned"}),
        (overrides.SWAPPED_LAYOUT, {"rope", "sinusoidal"}),
        (overrides.WRONG_BASE, {"rope", "sinusoidal"}),
        (overrides.SILENT_CLAMP, {"learned"}),
    ],
    ids=lambda v: getattr(v, "name", None),
)
def test_override_mutants_are_caught(mutant, broken: set[str]) -> None:
    found = failing(mutant)
    assert set(found) == broken, found
    for encoding in broken - {"learned"}:  # the goldens alone catch each of these
        assert any(name.startswith("case:") for name in found[encoding]), found[encoding]


def test_position_blind_tables_fail_the_permutation_property() -> None:
    found = failing(overrides.POSITION_BLIND, cases=False)
    assert set(found) == {"learned", "hierarchical"}
    for encoding in found:
        assert "property:breaks_permutation_equivariance" in found[encoding], found[encoding]


def test_swapped_real_imag_and_ignored_padding_are_caught() -> None:
    found = failing(overrides.SWAPPED_REAL_IMAG)
    assert set(found) == {"complex_order"}
    assert {"case:sentence", "case:sentence_real_imag"} <= found["complex_order"]
    # sin and cos exchanged turn the phase the wrong way: the properties see it too
    assert "property:complex_order_linear_phase" in failing(
        overrides.SWAPPED_REAL_IMAG, cases=False)["complex_order"]
    found = failing(overrides.ALWAYS_CIRCULAR)
    assert set(found) == {"conv"}
    assert any("leaks_position" in name for name in found["conv"]), found["conv"]
    assert any(name.startswith("case:") for name in found["conv"]), found["conv"]


def test_off_by_one_is_also_caught_by_properties_alone() -> None:
    found = failing(overrides.OFF_BY_ONE, cases=False)
    assert "property:rope_identity_at_zero" in found["rope"]
    assert {"property:sinusoidal_linear_shift[layout=interleaved]"} <= found["sinusoidal"]


def test_silent_clamp_is_caught_by_the_out_of_range_property() -> None:
    assert failing(overrides.SILENT_CLAMP) == {"learned": {"property:learned_out_of_range"}}


def test_flipped_sin_namespace_is_caught() -> None:
    # the goldens of every spec: exactly the encodings whose spec declares them trigonometric
    # (outputs through sin/cos of position * frequency) see the flip, transformer_xl's
    # sinusoidal R table among them; a new one is covered by its spec, not by an edit here
    found = failing("tests.mutants.flipped_sin", properties=False, gradients=False)
    trigonometric = {spec_id for spec_id, spec in specs().items() if spec.trigonometric}
    assert set(found) == trigonometric
    assert {"rope", "sinusoidal", "transformer_xl", "mrope"} <= trigonometric  # the flag is read
    # a sign flip keeps rotations rotations: of rope's properties, only the one that compares
    # sin with float64 truth sees it (R_0 = I and relative invariance still hold)
    properties = failing("tests.mutants.flipped_sin", cases=False, gradients=False,
                         encodings=["rope"])
    assert properties == {"rope": {"property:rope_phase_precision"}}, properties


def test_cli_names_failing_encodings_of_a_perturbed_namespace_module() -> None:
    # three encodings are enough for the command line's report (test_flipped_sin_namespace_is_
    # caught runs every spec in process)
    proc = run_cli("conformance", "--backend", "mutants.perturbed_sin", "--mode", "eager",
                   "--dtype", "float64", "--max-examples", "5", "-q", "--encoding", "xpos",
                   "--encoding", "rope", "--encoding", "alibi_bias", "--encoding", "sinusoidal",
                   env={"PYTHONPATH": str(TESTS)})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "failing encodings: rope, sinusoidal, xpos\n" in proc.stdout, proc.stdout[-2000:]
    assert "max abs error" in proc.stdout and "worst at index" in proc.stdout
    assert "conformance: " in proc.stdout and " failed," in proc.stdout
