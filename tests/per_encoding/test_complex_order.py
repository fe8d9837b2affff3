"""complex_order: bad inputs on every backend, the no-complex-dtypes path, and the goldens
against an independent formulation (polar form through NumPy's complex exponential)."""

from __future__ import annotations

import types

import numpy as np
import pytest

import posenc
from posenc import array_api, golden
from posenc.backends.backend import namespace_backend
from posenc.catalog import specs
from posenc.conformance import Options, run
from posenc.errors import ParameterError

R = np.ones((2, 5, 4))


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((R, R, R), {"output": "polar"}, r"output='polar' is not one of 'complex', 'real_imag'"),
        ((R, R, R[:, :4]), {}, r"amplitude, frequency and phase must share one shape .* "
                               r"phase \(2, 4, 4\)"),
        ((R[0, 0], R[0, 0], R[0, 0]), {}, r"at least 2 dims"),
        ((R, R, R), {"positions": [0, 1, 2]}, r"positions has shape \(3,\) but amplitude has "
                                              r"shape \(2, 5, 4\)"),
        ((R, R, R), {"positions": np.zeros((5, 2), int)}, r"positions has shape \(5, 2\)"),
        ((R, R, R), {"positions": np.zeros(5, bool)}, r"positions must have an integer"),
        ((R.astype(int), R, R), {}, r"amplitude must have a real floating dtype, got int"),
    ],
)
def test_bad_input_raises_a_parameter_error_naming_it(pe, args, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.complex_order(*args, **kwargs)


def test_mixed_dtypes_are_refused_naming_them() -> None:
    with pytest.raises(ParameterError, match="must share one dtype, got float32, float64"):
        posenc.complex_order(R, R.astype(np.float32), R)


def _without_complex() -> types.ModuleType:
    """NumPy's array-API namespace minus its complex dtypes (a library without complex numbers)."""
    import array_api_compat.numpy as xp

    module = types.ModuleType("no_complex_xp")
    for name in dir(xp):
        if not name.startswith("complex"):
            setattr(module, name, getattr(xp, name))
    return module


def test_complex_output_without_complex_dtypes_is_an_error() -> None:
    with array_api.use_namespace(_without_complex()), pytest.raises(
            ParameterError, match=r"output='complex' needs complex dtypes, which 'no_complex_xp' "
                                  r"lacks: pass output='real_imag'"):
        posenc.complex_order(R, R, R)
    with array_api.use_namespace(_without_complex()):
        real, imag = posenc.complex_order(R, R, R, output="real_imag")
    assert real.shape == imag.shape == R.shape


def test_harness_reports_complex_cases_unsupported_without_complex_dtypes() -> None:
    backend = namespace_backend("no_complex", _without_complex())
    results = run(Options(backends=[backend], encodings=["complex_order"], dtypes=["float64"],
                          modes=["eager"], max_examples=3))
    status = {r.check.name: r.status for r in results}
    assert status["sentence"] == status["batched_explicit_positions"] == "unsupported"
    assert status["complex_order_outputs_agree"] == "unsupported"
    assert status["sentence_real_imag"] == status["far_positions"] == "pass"
    assert status["complex_order_modulus"] == status["complex_order_linear_phase"] == "pass"


def test_complex_dtype_follows_the_compute_dtype() -> None:
    assert posenc.complex_order(R, R, R).dtype == np.complex128
    assert posenc.complex_order(*(R.astype(np.float16),) * 3).dtype == np.complex64
    real, imag = posenc.complex_order(*(R.astype(np.float16),) * 3, output="real_imag")
    assert real.dtype == imag.dtype == np.float16


@pytest.mark.parametrize("name", [c.name for c in specs()["complex_order"].cases])
def test_golden_vs_polar_form(name) -> None:
    """The stored golden against r·e^{iθ} written as NumPy's vectorised complex exponential."""
    case = golden.load(specs()["complex_order"]).cases[name]
    r, w, phi = (case.inputs[k] for k in ("amplitude", "frequency", "phase"))
    pos = case.inputs["positions"]
    k = np.arange(r.shape[-2]) if pos is None else pos
    z = r * np.exp(1j * (w * np.broadcast_to(k, r.shape[:-1])[..., None] + phi))
    expected = z if np.iscomplexobj(case.output) else np.stack([z.real, z.imag])
    np.testing.assert_allclose(case.output, expected, rtol=1e-13, atol=1e-13)
