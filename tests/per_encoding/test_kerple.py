"""KERPLE: bad inputs on every backend, the goldens against the official code's forward pass
(chijames/KERPLE, transcribed below), the power form with r2 = 1 against ALiBi, and broken
implementations that the properties catch."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import posenc
from posenc import golden
from posenc.catalog import specs
from posenc.encodings import public_functions
from posenc.errors import ParameterError
from posenc.specs import resolve_params

from ..failing import failing_properties

R = [0.5, 1.0, 1.5]


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((2, 4, [0.5, -1.0, 1.5], R), {}, r"r1\[1\]=-1.0 must be finite and > 0"),
        ((2, 4, [0.0, 1.0, 1.5], R), {}, r"r1\[0\]=0.0 must be finite and > 0"),
        ((2, 4, [0.5, 1.0, math.inf], R), {}, r"r1\[2\]=inf must be finite and > 0"),
        ((2, 4, R, [0.5, 1.0, math.nan]), {}, r"r2\[2\]=nan must be finite and > 0"),
        ((2, 4, R, [0.5, 0.0, 1.0]), {"form": "power"},
         r"r2\[1\]=0.0 must be > 0 and <= 2 for form='power'"),
        ((2, 4, R, [0.5, 2.5, 1.0]), {"form": "power"},
         r"r2\[1\]=2.5 must be > 0 and <= 2 for form='power'"),
        ((2, 4, R, [0.5, 1.0]), {}, r"r1 and r2 must both have shape \[heads\], got r1 \(3,\) "
                                    r"and r2 \(2,\)"),
        ((2, 4, [R], [R]), {}, r"got r1 \(1, 3\) and r2 \(1, 3\)"),
        ((2, 4, [1, 2, 3], R), {}, r"r1 must have a real floating dtype, got int"),
        ((5, 4, R, R), {}, r"q_len=5 must be <= k_len=4"),
        ((-1, 4, R, R), {}, r"q_len=-1 must be >= 0"),
        ((0, -4, R, R), {}, r"k_len=-4 must be >= 0"),
        ((1.0, 4, R, R), {}, r"q_len must be an int, got 1.0 \(float\)"),
        ((2, 4, R, R), {"form": "linear"}, r"form='linear' is not one of 'log', 'power'"),
    ],
)
def test_bad_input_raises_a_parameter_error_naming_it(pe, args, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.kerple(*args, **kwargs)


def test_mixed_dtypes_are_refused_naming_them() -> None:
    with pytest.raises(ParameterError, match="r1 and r2 must share one dtype, got float32 "
                                             "and float64"):
        posenc.kerple(2, 4, np.array(R, np.float32), np.array(R))


def test_r2_of_two_is_allowed_in_the_power_form(pe) -> None:
    out = pe.kerple(2, 3, R, [2.0, 2.0, 2.0], form="power", device=None)
    assert tuple(out.shape) == (3, 2, 3)


def test_the_result_has_the_dtype_of_the_parameters(pe) -> None:
    out = pe.kerple(2, 5, np.array(R, np.float32), np.array(R, np.float32))
    assert "float32" in str(out.dtype) and tuple(out.shape) == (3, 2, 5)


# --------------------------------------------------------------------------------------------
# the official code, transcribed (chijames/KERPLE megatron/mpu/layers.py, forward passes)
# --------------------------------------------------------------------------------------------


def official_kerple(r1: np.ndarray, r2: np.ndarray, q_len: int, k_len: int,
                    form: str) -> np.ndarray:
    """ParallelKerpleLog / ParallelKerplePower forward in float64, without the clamps (the
    parameters here are in range). diff = tril(i - j); log: -bias_p * log(1 + bias_a * diff)
    with (bias_p, bias_a) = (r1, r2); power: -bias_a * diff**bias_p with (bias_a, bias_p) =
    (r1, r2). The code handles q_len == k_len, and q_len == 1 by taking row k_len - 1; other
    q_len take the last q_len rows, the same alignment."""
    torch = pytest.importorskip("torch")
    diff = torch.tril(torch.arange(k_len).view(k_len, 1).repeat(1, k_len)
                      + torch.arange(0, -k_len, -1)).to(torch.float64)
    r1_t = torch.tensor(r1, dtype=torch.float64)[:, None, None]
    r2_t = torch.tensor(r2, dtype=torch.float64)[:, None, None]
    if form == "log":
        bias_p, bias_a = r1_t, r2_t
        bias = -bias_p * torch.log(1 + bias_a * diff)
    else:
        bias_a, bias_p = r1_t, r2_t
        bias = -diff.pow(bias_p) * bias_a
    return bias[:, k_len - q_len:, :].numpy()


def _cases() -> list[str]:
    return [c.name for c in specs()["kerple"].cases]


@pytest.mark.parametrize("name", _cases())
def test_golden_vs_official_code(name) -> None:
    """Equal on every entry the causal mask keeps (j <= i); above the diagonal the official code
    holds 0 (its tril) where the spec holds the kernel of |i - j|."""
    spec = specs()["kerple"]
    case = golden.load(spec).cases[name]
    p = resolve_params(spec, case.params)
    q_len, k_len = p["q_len"], p["k_len"]
    expected = official_kerple(case.inputs["r1"], case.inputs["r2"], q_len, k_len, p["form"])
    i = np.arange(k_len - q_len, k_len)[:, None]
    kept = np.broadcast_to(np.arange(k_len)[None, :] <= i, case.output.shape)
    np.testing.assert_allclose(case.output[kept], expected[kept], rtol=1e-14, atol=1e-15)
    np.testing.assert_array_equal(expected[~kept], 0.0)
    assert np.all(case.output[~kept] < 0)  # the kernel of |i - j| >= 1


def test_power_form_with_r2_one_is_symmetric_alibi() -> None:
    for heads in (4, 12):
        slopes = posenc.alibi_slopes(heads, dtype=np.float64)
        got = posenc.kerple(3, 7, slopes, np.ones(heads), form="power")
        expected = posenc.alibi_bias(heads, 3, 7, form="symmetric", dtype=np.float64)
        np.testing.assert_array_equal(got, expected)


def test_log_form_is_accurate_for_tiny_r2() -> None:
    """log1p: r2 * d = 3 * 2**-30 is lost entirely by float32's 1 + r2 * d."""
    r2 = np.array([2.0**-30], np.float32)
    out = posenc.kerple(1, 4, np.ones(1, np.float32), r2)
    np.testing.assert_allclose(out[0, 0], -(2.0**-30) * np.array([3, 2, 1, 0]), rtol=1e-6)


# --------------------------------------------------------------------------------------------
# broken implementations fail the properties (no goldens involved)
# --------------------------------------------------------------------------------------------

_IMPL = public_functions()


def _log_not_log1p(q_len: int, k_len: int, r1: Any, r2: Any, *, form: str = "log") -> Any:
    """The official code's log(1 + r2 * d), evaluated in float32 like any float32 model."""
    if form != "log":
        return _IMPL["kerple"](q_len, k_len, r1, r2, form=form)
    i = np.arange(k_len - q_len, k_len)[:, None]
    d = np.abs(i - np.arange(k_len)[None, :]).astype(np.float32)
    a, b = (np.asarray(v, np.float32)[:, None, None] for v in (r1, r2))
    return (-(a * np.log(np.float32(1) + b * d))).astype(np.asarray(r1).dtype)


def _zero_above_diagonal(q_len: int, k_len: int, r1: Any, r2: Any, **kw: Any) -> Any:
    """The official code's tril: 0 where j > i."""
    bias = _IMPL["kerple"](q_len, k_len, r1, r2, **kw)
    i = np.arange(k_len - q_len, k_len)[:, None]
    return np.where(np.arange(k_len)[None, :] > i, 0.0, bias).astype(bias.dtype)


def _no_checks(q_len: int, k_len: int, r1: Any, r2: Any, **kw: Any) -> Any:
    """Parameters used as given (r1 < 0 turns the penalty into a reward)."""
    return _IMPL["kerple"](q_len, k_len, np.abs(r1) + 1e-3, np.abs(r2) + 1e-3, **kw)


def _failing_properties(**overrides: Any) -> set[str]:
    return failing_properties(["kerple"], name="broken_kerple", **overrides)


def test_unbroken_backend_passes_the_properties() -> None:
    assert _failing_properties() == set()


def test_log_instead_of_log1p_fails_the_anchors() -> None:
    assert "kerple_anchors" in _failing_properties(kerple=_log_not_log1p)


def test_zero_above_the_diagonal_fails_the_relative_property() -> None:
    assert {"kerple_relative[form=log]", "kerple_relative[form=power]"} <= \
        _failing_properties(kerple=_zero_above_diagonal)


def test_missing_parameter_checks_fail_the_invalid_parameter_property() -> None:
    assert {"kerple_invalid_parameters[form=log]", "kerple_invalid_parameters[form=power]"} <= \
        _failing_properties(kerple=_no_checks)
