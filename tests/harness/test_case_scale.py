"""The tolerance scale of a golden case follows the output quantity (its magnitude, and how far
it moves with its inputs), not the largest input: a bias of 1000 the output never sees must
not loosen the float32 tolerance 1000-fold, while a cancelling sum keeps the input's scale."""

from __future__ import annotations

import dataclasses

import numpy as np

from posenc import golden
from posenc.backends import get_backend
from posenc.catalog import reference_function, specs
from posenc.conformance import Options, run
from posenc.conformance.case_scale import case_scale
from posenc.encodings import public_functions

_IMPL = public_functions()


def _case(spec_id: str, name: str, **inputs: np.ndarray | None) -> golden.GoldenCase:
    spec = specs()[spec_id]
    arrays = {d.name: inputs.get(d.name) for d in spec.inputs}
    output = golden.output_array(reference_function(spec)(*arrays.values(), **spec.defaults()))
    return golden.GoldenCase(name, {}, arrays, output)


def test_a_large_bias_on_masked_scores_does_not_raise_the_scale() -> None:
    case = golden.load(specs()["attention"]).cases["large_bias_on_masked_scores"]
    assert np.abs(case.inputs["bias"]).max() == 1000.0
    largest_output = np.abs(case.output).max()
    assert case_scale(specs()["attention"], case) <= 2 * largest_output < 10


def test_a_cancelling_sum_keeps_the_scale_of_its_inputs() -> None:
    """x + p with p close to -x: float32 rounding of x and p errs by eps * |x|, not eps * |x + p|."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 8)) * 100
    p = -x + rng.normal(size=(6, 8)) * 1e-3
    case = _case("combine", "cancelling", x=x, p=p)
    scale = case_scale(specs()["combine"], case)
    assert np.abs(case.output).max() < 0.01
    assert 0.5 * np.abs(x).max() <= scale <= np.abs(x).max() * 1.000001


def _slightly_off_attention(*args, **kw):
    return np.asarray(_IMPL["attention"](*args, **kw)) * (1 + 3e-5)


def test_an_error_hidden_by_the_old_rule_fails_the_case() -> None:
    """3e-5 relative error: within 4e-6 * 1000 (the old scale), beyond 4e-6 * |output|."""
    off = dataclasses.replace(get_backend("numpy"), name="slightly_off",
                              overrides={"attention": _slightly_off_attention})
    options = Options(backends=[off], dtypes=["float32"], modes=["eager"], encodings=["attention"],
                      properties=False, gradients=False)
    statuses = {r.check.name: r.status for r in run(options)}
    assert statuses["large_bias_on_masked_scores"] == "fail"
    options.backends = ["numpy"]
    assert {r.check.name: r.status for r in run(options)}["large_bias_on_masked_scores"] == "pass"
