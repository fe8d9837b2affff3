"""floater: bad inputs on every backend, and the goldens against torchdiffeq.

torchdiffeq's ``odeint(method="rk4")`` is Kutta's 3/8 rule (``rk4_alt_step_func``: stages at
t, t + s/3, t + 2s/3, t + s, weights 1/8, 3/8, 3/8, 1/8), not the classic RK4 the spec fixes
(stages t, t + s/2, t + s/2, t + s, weights 1/6, 1/3, 1/3, 1/6). Both are fourth order, but on a
ReLU network they differ by O(s^4), and more where the path crosses a kink: by 1.7e-3 on the
random golden (dt = 0.5, one step per row, ReLU units switching), far above rounding (on the
short paper-settings golden, where the network stays affine, they agree to the last bit). So:

* every golden is compared with torchdiffeq's own classic step (``rk4_step_func``) driven by
  its fixed-grid solver and ``odeint`` (a solver registered for the test), at rounding level;
* the public ``method="rk4"`` is compared on the linear autonomous goldens only, where every
  four-stage fourth-order method has the same update R(sM) and the two rules agree exactly.
"""

from __future__ import annotations

import contextlib
import importlib

import numpy as np
import pytest

with contextlib.suppress(ImportError):
    import torch  # noqa: F401  (before TensorFlow, see tests/peers/test_oracles.py)

import posenc
from posenc import golden, inputs
from posenc.catalog import specs
from posenc.errors import MixedArrayLibrariesError, ParameterError
from posenc.specs import resolve_params

D, HIDDEN = 3, 5
GOOD = {"p0": np.zeros(D), "w1": np.zeros((D + 1, HIDDEN)), "b1": np.zeros(HIDDEN),
        "w2": np.zeros((HIDDEN, D)), "b2": np.zeros(D)}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"length": 0}, r"length=0 must be >= 1"),
        ({"length": 3.0}, r"length must be an int, got 3.0"),
        ({"steps": 0}, r"steps=0 must be >= 1"),
        ({"steps": -2}, r"steps=-2 must be >= 1"),
        ({"steps": 2.5}, r"steps must be an int, got 2.5"),
        ({"steps": True}, r"steps must be an int, got True"),
        ({"dt": 0.0}, r"dt=0.0 must be a finite number > 0"),
        ({"dt": -0.01}, r"dt=-0.01 must be a finite number > 0"),
        ({"dt": float("nan")}, r"dt=nan must be a finite number > 0"),
        ({"dt": float("inf")}, r"dt=inf must be a finite number > 0"),
        ({"dt": "0.01"}, r"dt must be a number, got '0.01'"),
    ],
)
def test_bad_parameters_raise_a_parameter_error_naming_them(pe, params, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.floater(**GOOD, **{"length": 4, **params})


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("p0", np.zeros((1, D)), r"p0 must have shape \[d\] with d >= 1, got shape \(1, 3\)"),
        ("w1", np.zeros((D, HIDDEN)),
         r"w1 has shape \(3, 5\) but p0 has shape \(3,\): w1 must be \[d \+ 1, hidden\] = "
         r"\[4, hidden\]"),
        ("w1", np.zeros(D + 1), r"w1 has shape \(4,\) but p0 has shape \(3,\)"),
        ("w1", np.zeros((D + 1, 0)), r"w1 has shape \(4, 0\) .* with hidden >= 1"),
        ("b1", np.zeros(HIDDEN + 1),
         r"b1 has shape \(6,\) but p0 has shape \(3,\) and w1 has shape \(4, 5\): b1 must be "
         r"\[5\]"),
        ("w2", np.zeros((D, HIDDEN)),
         r"w2 has shape \(3, 5\) but p0 has shape \(3,\) and w1 has shape \(4, 5\): w2 must be "
         r"\[5, 3\]"),
        ("b2", np.zeros(D + 1), r"b2 has shape \(4,\) .*: b2 must be \[3\]"),
        ("b2", np.zeros((1, D)), r"b2 has shape \(1, 3\) .*: b2 must be \[3\]"),
        ("b1", np.zeros(HIDDEN, np.int64), r"b1 must have a real floating dtype, got int"),
    ],
)
def test_bad_arrays_raise_a_parameter_error_naming_them(pe, name, value, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.floater(**{**GOOD, name: value}, length=4)


def two_dtypes(pe) -> tuple[str, str]:
    """Two float dtypes the backend keeps apart: JAX without x64 turns float64 into float32 and
    array-api-strict has no float16."""
    return ("float32", "float64") if pe.__name__.endswith("strict") else ("float16", "float32")


def test_mixed_dtypes(pe) -> None:
    low, high = two_dtypes(pe)
    arrays = {k: v.astype(high) for k, v in GOOD.items()}
    with pytest.raises(ParameterError, match=rf"p0, w1, b1, w2 and b2 must have one dtype, but p0 "
                                             rf"is {high}, w1 is {high}, b1 is {high}, w2 is "
                                             rf"{low}, b2 is {high}"):
        pe.floater(**{**arrays, "w2": arrays["w2"].astype(low)}, length=4)


def test_mixed_array_libraries() -> None:
    torch = pytest.importorskip("torch")
    arrays = {**GOOD, "w2": torch.zeros(HIDDEN, D, dtype=torch.float64)}
    with pytest.raises(MixedArrayLibrariesError, match=r"p0 is a numpy array, w2 is a torch array"):
        posenc.floater(**arrays, length=2)


def test_output_shape_and_dtype(pe) -> None:
    arrays = {k: v.astype(np.float32) for k, v in GOOD.items()}
    out = pe.floater(**arrays, length=3, steps=1)
    assert tuple(out.shape) == (3, D)
    assert posenc.array_api.dtype_name(out.dtype) == "float32"


# --------------------------------------------------------------------------------------------
# Oracle: torchdiffeq (the solver library of the FLOATER paper's code)
# --------------------------------------------------------------------------------------------

F64_EPS = 2.3e-16
CASES = [c.name for c in specs()["floater"].cases]


def _load(name: str) -> tuple[golden.GoldenCase, dict]:
    spec = specs()["floater"]
    case = golden.load(spec).cases[name]
    return case, resolve_params(spec, case.params)


def _is_linear_autonomous(inputs: dict[str, np.ndarray]) -> bool:
    """h(p, t) = p M: w1 = [M, -M] over a zero time row, w2 = [I; -I], zero biases."""
    w1, w2 = inputs["w1"], inputs["w2"]
    d = inputs["p0"].shape[0]
    return (w1.shape[1] == 2 * d and not w1[d].any() and not inputs["b1"].any()
            and not inputs["b2"].any() and np.array_equal(w1[:d, d:], -w1[:d, :d])
            and np.array_equal(w2, np.concatenate([np.eye(d), -np.eye(d)])))


def _case_inputs(name: str) -> dict[str, np.ndarray]:
    spec = specs()["floater"]
    case = spec.case(name)
    return {i.name: inputs.generate(case.inputs[i.name], i.kind) for i in spec.inputs}


LINEAR_CASES = [name for name in CASES if _is_linear_autonomous(_case_inputs(name))]


def _solve(name: str, method: str) -> tuple[np.ndarray, np.ndarray, float]:
    """torchdiffeq's solution on the golden's grid (float64), the golden, and the tolerance:
    the same method in float64 on both sides differs only by rounding (summation order, and
    torchdiffeq's grid arange(n) * step vs t_n = n * step), a few eps64 per step."""
    torch = pytest.importorskip("torch")
    torchdiffeq = pytest.importorskip("torchdiffeq")
    case, params = _load(name)
    w = {k: torch.from_numpy(v) for k, v in case.inputs.items()}

    def field(t, p):  # the network, written here with torch ops: row vector [p, t]
        x = torch.cat([p, t.reshape(1).to(p.dtype)])
        return torch.relu(x @ w["w1"] + w["b1"]) @ w["w2"] + w["b2"]

    length, dt, steps = params["length"], params["dt"], params["steps"]
    t = torch.arange(length, dtype=torch.float64) * dt
    out = torchdiffeq.odeint(field, w["p0"], t, method=method,
                             options={"step_size": dt / steps}).numpy()
    scale = max(float(np.abs(case.output).max()),
                *(float(np.abs(v).max()) for v in case.inputs.values()))
    n_steps = (length - 1) * steps
    return out, case.output, 16 * (n_steps + 1) * F64_EPS * scale


@pytest.fixture
def classic_rk4(monkeypatch):
    """Registers torchdiffeq's classic RK4 step (rk4_step_func) as odeint method 'classic_rk4'."""
    pytest.importorskip("torchdiffeq")
    try:
        # the module, not the function of the same name that torchdiffeq._impl exports
        odeint_module = importlib.import_module("torchdiffeq._impl.odeint")
        from torchdiffeq._impl.rk_common import rk4_step_func
        from torchdiffeq._impl.solvers import FixedGridODESolver
    except ImportError as exc:
        pytest.skip(f"torchdiffeq's internals moved: {exc}")

    class ClassicRK4(FixedGridODESolver):
        order = 4

        def _step_func(self, func, t0, dt, t1, y0):
            f0 = func(t0, y0)
            return rk4_step_func(func, t0, dt, t1, y0, f0=f0), f0

    monkeypatch.setitem(odeint_module.SOLVERS, "classic_rk4", ClassicRK4)
    return "classic_rk4"


@pytest.mark.oracle
@pytest.mark.parametrize("name", CASES)
def test_golden_vs_torchdiffeq_classic_rk4(name, classic_rk4) -> None:
    got, expected, atol = _solve(name, classic_rk4)
    np.testing.assert_allclose(got, expected, rtol=0, atol=atol,
                               err_msg=f"floater/{name} vs torchdiffeq classic RK4")


@pytest.mark.oracle
@pytest.mark.parametrize("name", LINEAR_CASES)
def test_linear_golden_vs_torchdiffeq_rk4(name) -> None:
    """torchdiffeq's method='rk4' (3/8 rule) equals the classic RK4 on linear autonomous h."""
    got, expected, atol = _solve(name, "rk4")
    np.testing.assert_allclose(got, expected, rtol=0, atol=atol,
                               err_msg=f"floater/{name} vs torchdiffeq odeint(method='rk4')")


def test_there_is_a_linear_golden() -> None:
    assert LINEAR_CASES, "the linear special solution golden case disappeared from the spec"
