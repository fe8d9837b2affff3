"""recurrent: bad inputs on every backend, and the goldens against NumPy's matrix_power."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from posenc import golden
from posenc.catalog import specs
from posenc.errors import MixedArrayLibrariesError, ParameterError

P0 = np.array([0.0, 1.0, 0.5])
A = np.eye(3) * 0.5


@pytest.mark.parametrize(
    ("length", "message"),
    [
        (0, r"length=0 must be >= 1"),
        (-3, r"length=-3 must be >= 1"),
        (2.0, r"length must be an int, got 2.0"),
        (True, r"length must be an int, got True"),
        (None, r"length must be an int, got None"),
    ],
)
def test_bad_length(pe, length, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.recurrent(P0, A, length=length)


@pytest.mark.parametrize(
    ("p0", "transition", "message"),
    [
        (np.zeros((2, 3)), A, r"p0 must have shape \[d\] with d >= 1, got shape \(2, 3\)"),
        (np.zeros(0), np.zeros((0, 0)), r"p0 must have shape \[d\] with d >= 1, got shape \(0,\)"),
        (P0, np.zeros((3, 4)),
         r"transition has shape \(3, 4\) but p0 has shape \(3,\): transition must be \[d, d\] = "
         r"\[3, 3\]"),
        (P0, np.zeros((4, 4)), r"transition has shape \(4, 4\) but p0 has shape \(3,\)"),
        (P0, np.zeros(3), r"transition has shape \(3,\) but p0 has shape \(3,\)"),
        (np.array([1, 2, 3]), A, r"p0 must have a real floating dtype, got int"),
    ],
)
def test_bad_arrays_raise_a_parameter_error_naming_them(pe, p0, transition, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.recurrent(p0, transition, length=4)


def test_mixed_dtypes(pe) -> None:
    # JAX without x64 turns float64 into float32 and array-api-strict has no float16
    low, high = ("float32", "float64") if pe.__name__.endswith("strict") else ("float16", "float32")
    with pytest.raises(ParameterError, match=rf"p0 and transition must have the same dtype, got "
                                             rf"{low} and {high}"):
        pe.recurrent(P0.astype(low), A.astype(high), length=4)


def test_mixed_array_libraries() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(MixedArrayLibrariesError, match=r"p0 is a torch array, transition is a "
                                                       r"numpy array"):
        posenc.recurrent(torch.zeros(3, dtype=torch.float64), A, length=2)


def test_output_shape_and_dtype(pe) -> None:
    out = pe.recurrent(P0.astype(np.float32), A.astype(np.float32), length=5)
    assert tuple(out.shape) == (5, 3)
    assert posenc.array_api.dtype_name(out.dtype) == "float32"


# --------------------------------------------------------------------------------------------
# Oracle: numpy.linalg.matrix_power (binary powering with matmul), independent of
# posenc's reference (a float64 step-by-step loop with math.fsum dot products).
# --------------------------------------------------------------------------------------------

F64_EPS = 2.3e-16


@pytest.mark.oracle
@pytest.mark.parametrize("name", [c.name for c in specs()["recurrent"].cases])
def test_golden_vs_numpy_matrix_power(name) -> None:
    case = golden.load(specs()["recurrent"]).cases[name]
    p0, a = case.inputs["p0"], case.inputs["transition"]
    length, d = case.output.shape
    powers = [np.linalg.matrix_power(a, k) for k in range(length)]
    expected = np.stack([m @ p0 for m in powers])
    # Both sides round each of at most `length` products of d-term dot products: an error of
    # about d * length * eps64 relative to max_k ||A^k|| ||p0||.
    scale = max(np.linalg.norm(m, 2) for m in powers) * np.linalg.norm(p0)
    np.testing.assert_allclose(case.output, expected, rtol=0,
                               atol=4 * d * length * F64_EPS * scale,
                               err_msg=f"recurrent/{name} vs numpy matrix_power")
