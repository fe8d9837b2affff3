"""Diagnoses are ranked by how much of the error pattern each leaves unexplained, the message
says why the leader leads, and a failing property is diagnosed on its last call."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from posenc.backends import get_backend
from posenc.catalog import specs
from posenc.conformance import Options
from posenc.conformance.case_scale import case_scale
from posenc.conformance.diagnose import Diagnoser
from posenc.conformance.runner import plan, run
from posenc.conformance.tolerances import for_spec
from posenc.golden import load
from posenc.reference.rope import rope as reference_rope


def _diagnose(case_name: str, planted: str, noise: float) -> Any:
    spec = specs()["rope"]
    case = load(spec).cases[case_name]
    diagnoser = Diagnoser()
    diagnosis = next(d for d in spec.diagnoses if d.name == planted)
    actual = diagnoser.output(spec, case, diagnosis)
    # float32-sized noise on top: a real backend's output, not the reference's
    actual = actual + noise * np.random.default_rng(0).standard_normal(actual.shape)
    return diagnoser.diagnose(spec, case, actual, for_spec(spec, "float32", "exact"),
                              scale=case_scale(spec, case), angle_bound=case.angle_bound)


def test_a_position_growing_error_leads_with_bfloat16_positions() -> None:
    match = _diagnose("near_2_17", "positions_in_bfloat16", 1e-6)
    assert match is not None and match.diagnosis.name == "positions_in_bfloat16"
    assert match.unexplained < 1e-3
    line = match.line()
    assert "why it leads: it leaves under 0.1% of the error unexplained" in line
    assert match.record()["unexplained"] == match.unexplained


def test_an_off_by_one_leads_with_the_shift_and_names_the_runner_up() -> None:
    match = _diagnose("llama_head_dim_128", "positions_plus_one", 1e-6)
    assert match is not None and match.diagnosis.name == "positions_plus_one"
    assert "why it leads: it leaves under 0.1% of the error unexplained" in match.line()
    if match.runner_up is not None:  # another candidate explains less of it
        assert match.runner_up[1] > match.unexplained
        assert f"the next candidate ({match.runner_up[0]})" in match.line()


def _shifted_rope(x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
                  rotary_dim: Any = None, scaling: Any = None, seq_len: Any = None) -> Any:
    """A port that counts positions from 1: the reference's rotation at positions + 1."""
    x = np.asarray(x)
    pos = np.arange(x.shape[-2]) if positions is None else np.asarray(positions)
    return reference_rope(x, pos + 1, base=base, layout=layout, rotary_dim=rotary_dim,
                          scaling=scaling, seq_len=seq_len).astype(x.dtype)


def test_a_failing_property_is_diagnosed_on_its_last_call() -> None:
    backend = dataclasses.replace(get_backend("numpy"), name="from-one",
                                  overrides={"rope": _shifted_rope})
    options = Options(backends=[backend], encodings=["rope"], dtypes=["float64"],
                      modes=["eager"], gradients=False, cases=False, max_examples=3)
    checks = [c for c in plan(options) if c.name == "rope_identity_at_zero"]
    (result,) = run(options, checks=checks)
    assert result.status == "fail", result.message
    assert result.details["diagnosis"]["name"] == "positions_plus_one", result.message
    assert result.details["diagnosis"]["on"] == "the property's last call"
    assert "likely: positions off by one — output on the property's last call matches" in \
        result.message
    assert "why it leads:" in result.message
