"""Every tolerance admits the rounding no correct implementation avoids: half an ulp of the
result dtype plus the rounding of the inputs (one ulp in all, relative), unless the spec
declares the result a copy, which is exact."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from posenc.catalog import specs
from posenc.conformance.tolerances import DEFAULTS, PROFILES, tolerance_for

# machine epsilon (one ulp at 1, relative): 2^-(significand bits - 1)
ULP = {"float64": 2.0**-52, "float32": 2.0**-23, "bfloat16": 2.0**-7, "float16": 2.0**-10}


def test_the_ulp_table_matches_numpy() -> None:
    assert ULP["float64"] == np.finfo(np.float64).eps
    assert ULP["float32"] == np.finfo(np.float32).eps
    assert ULP["float16"] == np.finfo(np.float16).eps


@pytest.mark.parametrize("spec_id", sorted(specs()))
@pytest.mark.parametrize("dtype", sorted(DEFAULTS))
@pytest.mark.parametrize("profile", PROFILES)
def test_tolerance_is_at_least_result_half_ulp_plus_input_rounding(
        spec_id: str, dtype: str, profile: str) -> None:
    spec = specs()[spec_id]
    tol = tolerance_for(dtype, spec.tolerances, profile, spec.trigonometric)
    if tol.rtol == 0 and tol.atol == 0:  # a declared copy: no rounding happens
        assert "cop" in tol.reason, (spec_id, dtype, tol.reason)
        return
    # the allowance at |expected| <= scale is at least (rtol + atol) * |expected|
    half_ulp, input_rounding = ULP[dtype] / 2, ULP[dtype] / 2
    assert tol.rtol + tol.atol >= half_ulp + input_rounding, (spec_id, dtype, tol)


def test_looser_profiles_never_tighten() -> None:
    for spec in specs().values():
        for dtype in DEFAULTS:
            tols = [tolerance_for(dtype, spec.tolerances, p, spec.trigonometric)
                    for p in PROFILES]
            for a, b in itertools.pairwise(tols):
                assert b.rtol >= a.rtol and b.atol >= a.atol, (spec.id, dtype)
                assert b.angle * b.compute_eps >= a.angle * a.compute_eps, (spec.id, dtype)
