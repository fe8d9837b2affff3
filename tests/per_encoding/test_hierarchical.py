"""hierarchical: bad inputs on every backend, and the goldens against independent formulations.

There is no installable peer (bert4keras pins an old Keras), so the goldens are checked against
the formula written two other ways in NumPy: the bert4keras-style gather (0-based, vectorised)
and the blog's own 1-based q_{(i-1)n+j} = alpha u_i + (1 - alpha) u_j, building the whole n²
table. The published claim q_k = p_k for k < n is checked too.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import posenc
from posenc import golden
from posenc.catalog import specs
from posenc.errors import ParameterError, PositionOutOfRangeError
from posenc.specs import resolve_params

TABLE = np.arange(16.0).reshape(8, 2) / 4  # n = 8: valid positions are [0, 64)


# --------------------------------------------------------------------------------------------
# bad inputs, on every backend
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("alpha", [0, 1, 1.5, -0.2, float("nan"), float("inf"), 0.0, 1.0])
def test_alpha_outside_the_open_unit_interval(pe, alpha) -> None:
    message = re.escape(f"alpha={alpha!r} must be a finite number strictly between 0 and 1")
    with pytest.raises(ParameterError, match=message):
        pe.hierarchical([0, 1], TABLE, alpha=alpha)


@pytest.mark.parametrize("alpha", [True, "0.4", None])
def test_alpha_not_a_number(pe, alpha) -> None:
    with pytest.raises(ParameterError, match=re.escape(f"alpha must be a number, got {alpha!r}")):
        pe.hierarchical([0, 1], TABLE, alpha=alpha)


def test_out_of_range_is_outside_n_squared(pe) -> None:
    with pytest.raises(PositionOutOfRangeError, match=r"positions contains 64, outside the valid "
                                                      r"range \[0, 64\)"):
        pe.hierarchical([0, 64, 3], TABLE)
    with pytest.raises(PositionOutOfRangeError, match=r"positions contains -1"):
        pe.hierarchical([[0, -1]], TABLE)
    # positions in [n, n²) are the point of the encoding, not an error
    out = np.asarray(pe.hierarchical([8, 63], TABLE))
    assert out.shape == (2, 2) and np.isfinite(out).all()


def test_bad_table_and_policy(pe) -> None:
    with pytest.raises(ParameterError, match=r"table must have shape \[n, dim\], got shape \(10,\)"):
        pe.hierarchical([0], np.zeros(10))
    with pytest.raises(ParameterError, match=r"table must have shape \[n, dim\], got shape "
                                             r"\(2, 3, 4\)"):
        pe.hierarchical([0], np.zeros((2, 3, 4)))
    with pytest.raises(ParameterError, match=r"table has 0 rows"):
        pe.hierarchical([0], np.zeros((0, 4)))
    with pytest.raises(ParameterError, match=r"table must have a real floating dtype, got int"):
        pe.hierarchical([0], [[1, 2], [3, 4]])
    with pytest.raises(ParameterError, match=r"out_of_range='wrap' is not one of 'error', 'clip'"):
        pe.hierarchical([0], TABLE, out_of_range="wrap")


@pytest.mark.parametrize("dtype", ["int8", "int16", "uint8", "uint16"])
def test_narrow_integer_positions(pe, dtype) -> None:
    """Narrow positions give the rows of the same int64 positions on every backend (torch's
    index_select and TensorFlow's gather refuse them as indices; position // n and % n must not
    wrap either), and the range check still names the value."""
    from posenc.backends import get_backend

    backend = get_backend(pe.__name__.rsplit(".", 1)[-1])
    table = backend.from_numpy(TABLE, "float32", None)
    values = np.array([[0, 7], [8, 63], [20, 45]])
    native = backend.from_numpy(values, dtype, None)
    assert dtype in str(native.dtype)
    expected = posenc.hierarchical(values.astype(np.int64), TABLE.astype(np.float32))
    np.testing.assert_array_equal(backend.to_numpy(posenc.hierarchical(native, table)), expected)
    far = backend.from_numpy(np.array([0, 100]), dtype, None)
    with pytest.raises(PositionOutOfRangeError, match=r"positions contains 100, outside the "
                                                      r"valid range \[0, 64\)"):
        posenc.hierarchical(far, table)
    clipped = posenc.hierarchical(far, table, out_of_range="clip")
    np.testing.assert_array_equal(backend.to_numpy(clipped),
                                  posenc.hierarchical(np.array([0, 63]), TABLE.astype(np.float32)))


def test_positions_must_be_integers(pe) -> None:
    with pytest.raises(ParameterError, match=r"positions must have an integer dtype, got float"):
        pe.hierarchical([0.0, 1.0], TABLE)


def test_first_n_rows_are_the_table_exactly() -> None:
    """The implementation's own claim, on NumPy float32 and float64 (all backends and dtypes:
    the hierarchical_matches_table property)."""
    for dtype in (np.float32, np.float64):
        table = (np.random.default_rng(0).standard_normal((16, 5)) / 3).astype(dtype)
        out = posenc.hierarchical(np.arange(16), table, alpha=0.3)
        assert out.dtype == dtype
        np.testing.assert_array_equal(out, table)


# --------------------------------------------------------------------------------------------
# goldens against independent formulations
# --------------------------------------------------------------------------------------------

SPEC = specs()["hierarchical"]
CASES = [c.name for c in SPEC.cases]
F64_EPS = 2.3e-16  # float64 machine epsilon (2**-52 = 2.22e-16), rounded up


def _golden(name: str) -> tuple[golden.GoldenCase, dict]:
    case = golden.load(SPEC).cases[name]
    return case, resolve_params(SPEC, case.params)


def _valid(positions: np.ndarray, n: int, policy: str) -> np.ndarray:
    if policy == "clip":
        return np.clip(positions, 0, n * n - 1)
    assert ((positions >= 0) & (positions < n * n)).all(), "an 'error' case out of range"
    return positions


def _atol(table: np.ndarray, alpha: float) -> float:
    # a handful of float64 roundings of values up to |p| (1 + 2 alpha/(1 - alpha))
    return 16 * F64_EPS * float(np.abs(table).max()) * (1 + 2 * alpha / (1 - alpha))


@pytest.mark.parametrize("name", CASES)
def test_golden_vs_bert4keras_style_gather(name: str) -> None:
    """u = (p - alpha p[:1]) / (1 - alpha); alpha u[k // n] + (1 - alpha) u[k % n], vectorised."""
    case, params = _golden(name)
    table, alpha = case.inputs["table"], params["alpha"]
    n = table.shape[0]
    k = _valid(case.inputs["positions"], n, params["out_of_range"])
    u = (table - alpha * table[:1]) / (1 - alpha)
    expected = alpha * u[k // n] + (1 - alpha) * u[k % n]
    np.testing.assert_allclose(case.output, expected, rtol=0, atol=_atol(table, alpha))


@pytest.mark.parametrize("name", CASES)
def test_golden_vs_blog_one_based_table(name: str) -> None:
    """The blog's indexing: q_{(i-1)n + j} = alpha u_i + (1 - alpha) u_j for i, j = 1..n."""
    case, params = _golden(name)
    table, alpha = case.inputs["table"], params["alpha"]
    n, dim = table.shape
    u = {i: (table[i - 1] - alpha * table[0]) / (1 - alpha) for i in range(1, n + 1)}
    q = {}  # 1-based position -> row
    for i in range(1, n + 1):
        for j in range(1, n + 1):
            q[(i - 1) * n + j] = alpha * u[i] + (1 - alpha) * u[j]
    k = _valid(case.inputs["positions"], n, params["out_of_range"])
    expected = np.array([q[int(m) + 1] for m in k.reshape(-1)]).reshape(*k.shape, dim)
    np.testing.assert_allclose(case.output, expected, rtol=0, atol=_atol(table, alpha))


@pytest.mark.parametrize("name", CASES)
def test_golden_first_rows_are_the_table(name: str) -> None:
    """Su's design goal: the first n positions keep their trained rows (up to the float64
    roundings of the literal formula that the reference evaluates)."""
    case, params = _golden(name)
    table = case.inputs["table"]
    k = _valid(case.inputs["positions"], table.shape[0], params["out_of_range"])
    below = k < table.shape[0]
    assert below.any()
    np.testing.assert_allclose(case.output[below], table[k[below]], rtol=0,
                               atol=_atol(table, params["alpha"]))


def test_golden_covers_block_edges_and_both_policies() -> None:
    """The goldens exercise what ports get wrong: both index halves, clipping and n = 1."""
    seen = {"clip": False, "n1": False, "beyond_n": False, "alpha": set()}
    for name in CASES:
        case, params = _golden(name)
        n = case.inputs["table"].shape[0]
        seen["clip"] |= params["out_of_range"] == "clip"
        seen["n1"] |= n == 1
        seen["beyond_n"] |= bool((case.inputs["positions"] >= n).any())
        seen["alpha"].add(params["alpha"])
    assert seen["clip"] and seen["n1"] and seen["beyond_n"]
    assert len(seen["alpha"]) >= 2 and any(not math.isclose(a, 0.4) for a in seen["alpha"])
