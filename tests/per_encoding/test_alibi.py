"""ALiBi: bad inputs on every backend, the result's library/dtype/shape, the goldens against
peers (transformers BLOOM and MPT, keras-hub) and against Press et al.'s published
``get_slopes`` written out here, and broken implementations that the properties catch."""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np
import pytest

# keras-hub pulls in TensorFlow; torch must be imported first (importing TensorFlow first has
# crashed the process).
with contextlib.suppress(ImportError):
    import torch  # noqa: F401

import posenc
from posenc import golden
from posenc.catalog import specs
from posenc.encodings import public_functions
from posenc.errors import ParameterError
from posenc.reference import alibi as reference
from posenc.specs import resolve_params

from ..failing import failing_properties

F32_EPS = 1.2e-7  # float32 machine epsilon (2**-23), rounded up
HEAD_COUNTS = range(1, 81)


# --------------------------------------------------------------------------------------------
# bad inputs
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((0,), {}, r"num_heads=0 must be >= 1"),
        ((-4,), {}, r"num_heads=-4 must be >= 1"),
        ((True,), {}, r"num_heads must be an int, got True \(bool\)"),
        ((8.0,), {}, r"num_heads must be an int, got 8.0 \(float\)"),
        ((8,), {"max_bias": 0.0}, r"max_bias=0.0 must be a finite number > 0"),
        ((8,), {"max_bias": -8}, r"max_bias=-8 must be a finite number > 0"),
        ((8,), {"max_bias": math.inf}, r"max_bias=inf must be a finite number > 0"),
        ((8,), {"max_bias": math.nan}, r"max_bias=nan must be a finite number > 0"),
        ((8,), {"max_bias": "8"}, r"max_bias must be a number, got '8' \(str\)"),
        ((8,), {"dtype": "int32"}, r"dtype must be a real floating dtype, got .*int32"),
        ((8,), {"dtype": "bool"}, r"dtype must be a real floating dtype, got .*bool"),
    ],
)
def test_slopes_bad_inputs(pe, args, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.alibi_slopes(*args, **kwargs)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((8, 5, 3), {}, r"q_len=5 must be <= k_len=3"),
        ((8, 2, 1), {"form": "key_only"}, r"q_len=2 must be <= k_len=1"),
        ((8, -1, 3), {}, r"q_len=-1 must be >= 0"),
        ((8, 0, -2), {}, r"k_len=-2 must be >= 0"),
        ((8, 2.0, 3), {}, r"q_len must be an int, got 2.0 \(float\)"),
        ((8, 2, False), {}, r"k_len must be an int, got False \(bool\)"),
        ((0, 2, 3), {}, r"num_heads=0 must be >= 1"),
        ((12.5, 2, 3), {}, r"num_heads must be an int, got 12.5"),
        ((8, 2, 3), {"form": "alibi"},
         r"form='alibi' is not one of 'causal', 'key_only', 'symmetric'"),
        ((8, 2, 3), {"max_bias": 0}, r"max_bias=0 must be a finite number > 0"),
        ((8, 2, 3), {"max_bias": -math.inf}, r"max_bias=-inf must be a finite number > 0"),
        ((8, 2, 3), {"dtype": "int64"}, r"dtype must be a real floating dtype, got .*int64"),
    ],
)
def test_bias_bad_inputs(pe, args, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.alibi_bias(*args, **kwargs)


def test_dtype_name_without_a_backend_is_an_error() -> None:
    with pytest.raises(ParameterError, match=r"dtype='float32'"):
        posenc.alibi_slopes(8, dtype="float32")


# --------------------------------------------------------------------------------------------
# the result: library, dtype, shape
# --------------------------------------------------------------------------------------------


def test_result_library_dtype_and_shapes(pe) -> None:
    slopes = pe.alibi_slopes(12)
    assert "float32" in str(slopes.dtype) and tuple(slopes.shape) == (12,)
    for form, shape in [("causal", (12, 3, 7)), ("symmetric", (12, 3, 7)),
                        ("key_only", (12, 1, 7))]:
        bias = pe.alibi_bias(12, 3, 7, form=form, dtype="float32")
        assert "float32" in str(bias.dtype) and tuple(bias.shape) == shape, form
        assert type(bias) is type(slopes)
    assert tuple(pe.alibi_bias(2, 0, 0).shape) == (2, 0, 0)
    assert tuple(pe.alibi_bias(2, 0, 0, form="key_only").shape) == (2, 1, 0)


def test_numpy_without_dtype() -> None:
    slopes = posenc.alibi_slopes(8)
    assert isinstance(slopes, np.ndarray) and slopes.dtype == np.float32
    np.testing.assert_array_equal(slopes, 2.0 ** -np.arange(1, 9))  # powers of two: exact
    bias = posenc.alibi_bias(8, 4, 4, dtype=np.float16)
    assert bias.dtype == np.float16
    assert not np.signbit(np.diagonal(bias, axis1=1, axis2=2)).any(), "distance 0 gives +0.0"


# --------------------------------------------------------------------------------------------
# independent constructions: the paper's numbers and Press's published get_slopes
# --------------------------------------------------------------------------------------------


def press_get_slopes(n: int) -> list[float]:
    """ofirpress/attention_with_linear_biases fairseq/models/transformer.py, as published."""

    def get_slopes_power_of_2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return (get_slopes_power_of_2(closest_power_of_2)
            + press_get_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2])


def test_paper_examples() -> None:
    """Section 3 of the paper: 8 heads get 1/2, 1/4, ..., 1/256; 16 heads interpolate them by
    geometric averaging, 1/2**0.5, 1/2, 1/2**1.5, ..., 1/256."""
    eight = [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256]
    np.testing.assert_array_equal(reference.alibi_slopes(num_heads=8, max_bias=8.0), eight)
    sixteen = reference.alibi_slopes(num_heads=16, max_bias=8.0)
    np.testing.assert_array_equal(sixteen[1::2], eight)
    np.testing.assert_allclose(sixteen[0::2], np.sqrt(np.array([1.0, *eight[:-1]]) * eight),
                               rtol=1e-15)
    twelve = reference.alibi_slopes(num_heads=12, max_bias=8.0)  # 8 + the odd powers of 16's
    np.testing.assert_array_equal(twelve[:8], eight)
    np.testing.assert_allclose(twelve[8:], 2 ** -np.array([0.5, 1.5, 2.5, 3.5]), rtol=1e-15)


@pytest.mark.parametrize("n", HEAD_COUNTS)
def test_slopes_vs_press_get_slopes(n) -> None:
    expected = np.array(press_get_slopes(n))
    np.testing.assert_allclose(reference.alibi_slopes(num_heads=n, max_bias=8.0), expected,
                               rtol=1e-14, atol=0)
    np.testing.assert_allclose(posenc.alibi_slopes(n, dtype=np.float64), expected,
                               rtol=1e-14, atol=0)


def test_golden_slopes_vs_press_get_slopes() -> None:
    spec = specs()["alibi_slopes"]
    for name, case in golden.load(spec).cases.items():
        params = resolve_params(spec, case.params)
        if params["max_bias"] == 8.0:
            np.testing.assert_allclose(case.output, press_get_slopes(params["num_heads"]),
                                       rtol=1e-14, atol=0, err_msg=name)


def test_golden_bias_is_the_formula() -> None:
    """Every bias golden against the formula written with NumPy broadcasting."""
    spec = specs()["alibi_bias"]
    for name, case in golden.load(spec).cases.items():
        p = resolve_params(spec, case.params)
        m = reference.alibi_slopes(num_heads=p["num_heads"], max_bias=p["max_bias"])
        i = np.arange(p["k_len"] - p["q_len"], p["k_len"])[:, None]
        j = np.arange(p["k_len"])[None, :]
        rel = {"causal": -(i - j), "symmetric": -np.abs(i - j), "key_only": j}[p["form"]]
        expected = m[:, None, None] * rel
        if p["head_dim"] is not None:  # Falcon's order: the bias over sqrt(head_dim)
            expected = expected / np.sqrt(p["head_dim"])
        np.testing.assert_array_equal(case.output, expected, err_msg=name)


# --------------------------------------------------------------------------------------------
# peers
# --------------------------------------------------------------------------------------------


def _golden_cases(spec_id: str) -> list[tuple[str, golden.GoldenCase, dict[str, Any]]]:
    spec = specs()[spec_id]
    return [(name, case, resolve_params(spec, case.params))
            for name, case in golden.load(spec).cases.items()]


def _slope_rtol(n: int) -> float:
    """BLOOM and MPT compute slopes in float32 (BLOOM as powers of a rounded base)."""
    return (n + 4) * F32_EPS


@pytest.fixture(scope="module")
def bloom():
    pytest.importorskip("torch")
    return pytest.importorskip("transformers.models.bloom.modeling_bloom")


@pytest.fixture(scope="module")
def mpt():
    pytest.importorskip("torch")
    return pytest.importorskip("transformers.models.mpt.modeling_mpt")


def _bloom_key_only(bloom, num_heads: int, k_len: int) -> np.ndarray:
    """BLOOM's [heads, 1, k_len] alibi: slope * (cumsum(mask) - 1) = slope * j for a full mask."""
    import torch

    mask = torch.ones((1, k_len), dtype=torch.int64)
    out = bloom.build_alibi_tensor(mask, num_heads, torch.float32)
    return out.reshape(num_heads, 1, k_len).double().numpy()


@pytest.mark.oracle
@pytest.mark.parametrize("n", HEAD_COUNTS)
def test_slopes_vs_bloom(bloom, n) -> None:
    """BLOOM's slopes, read at position 1 of its key-only bias, for 1..80 heads."""
    bloom_slopes = _bloom_key_only(bloom, n, 2)[:, 0, 1]
    np.testing.assert_allclose(reference.alibi_slopes(num_heads=n, max_bias=8.0), bloom_slopes,
                               rtol=_slope_rtol(n), atol=0)
    np.testing.assert_allclose(posenc.alibi_slopes(n, dtype=np.float64), bloom_slopes,
                               rtol=_slope_rtol(n), atol=0)


@pytest.mark.oracle
def test_golden_vs_bloom(bloom) -> None:
    compared = 0
    for name, case, p in _golden_cases("alibi_slopes"):
        if p["max_bias"] == 8.0:
            got = _bloom_key_only(bloom, p["num_heads"], 2)[:, 0, 1]
            np.testing.assert_allclose(case.output, got, rtol=_slope_rtol(p["num_heads"]),
                                       atol=0, err_msg=name)
            compared += 1
    for name, case, p in _golden_cases("alibi_bias"):
        # BLOOM's order: Falcon-order cases (head_dim) are in tests/per_encoding/test_falcon_alibi.py
        if p["max_bias"] == 8.0 and p["form"] == "key_only" and p["head_dim"] is None:
            got = _bloom_key_only(bloom, p["num_heads"], p["k_len"])
            np.testing.assert_allclose(case.output, got, rtol=_slope_rtol(p["num_heads"]),
                                       atol=0, err_msg=name)
            compared += 1
    assert compared >= 8


def _last_row(case: golden.GoldenCase, p: dict[str, Any]) -> np.ndarray:
    """The golden's bias for the query at position k_len - 1, as [heads, k_len]:
    m * (j - (k_len - 1)). key_only rows are shifted by their last entry (softmax-invariant)."""
    out = case.output
    if p["form"] == "key_only":
        return out[:, 0, :] - out[:, 0, -1:]
    return out[:, -1, :]


@pytest.mark.oracle
def test_slopes_vs_mpt(mpt) -> None:
    """MPT builds slopes from the next higher power of two (odd-indexed, then even-indexed);
    the list is the same. Its bias arange(1 - L, 1) * m reads the slope at index L - 2."""
    for n in HEAD_COUNTS:
        for max_bias in (8, 4, 16):
            got = mpt.build_mpt_alibi_tensor(n, 2, alibi_bias_max=max_bias).double().numpy()
            np.testing.assert_allclose(reference.alibi_slopes(num_heads=n, max_bias=max_bias),
                                       -got[:, 0, 0], rtol=4 * F32_EPS, atol=0,
                                       err_msg=f"num_heads={n}, max_bias={max_bias}")


@pytest.mark.oracle
def test_golden_vs_mpt(mpt) -> None:
    for name, case, p in _golden_cases("alibi_bias"):
        if p["k_len"] == 0 or p["q_len"] == 0 or p["head_dim"] is not None:
            continue
        got = mpt.build_mpt_alibi_tensor(p["num_heads"], p["k_len"],
                                         alibi_bias_max=p["max_bias"]).double().numpy()
        np.testing.assert_allclose(_last_row(case, p), got[:, 0, :], rtol=4 * F32_EPS,
                                   atol=0, err_msg=name)
    for name, case, p in _golden_cases("alibi_slopes"):
        got = mpt.build_mpt_alibi_tensor(p["num_heads"], 2, alibi_bias_max=p["max_bias"])
        np.testing.assert_allclose(case.output, -got.double().numpy()[:, 0, 0],
                                   rtol=4 * F32_EPS, atol=0, err_msg=name)


@pytest.fixture(scope="module")
def keras_hub():
    try:
        return pytest.importorskip("keras_hub", reason="keras-hub is not installed")
    except pytest.skip.Exception:
        raise
    except Exception as exc:  # TensorFlow/Keras can fail to import in odd ways
        pytest.skip(f"keras_hub cannot be imported here: {type(exc).__name__}: {exc}")


@pytest.mark.oracle
def test_golden_vs_keras_hub(keras_hub) -> None:
    """keras-hub's AlibiBias adds m * (j - (k_len - 1)) to every query row (float64 layer:
    its slopes are Press's recurrence in Python floats)."""
    from keras import ops

    compared = 0
    for name, case, p in _golden_cases("alibi_bias"):
        if p["q_len"] == 0 or p["head_dim"] is not None:
            continue
        layer = keras_hub.layers.AlibiBias(alibi_bias_max=p["max_bias"], dtype="float64")
        rows = case.output.shape[1]
        scores = np.zeros((1, p["num_heads"], rows, p["k_len"]))
        got = np.asarray(ops.convert_to_numpy(layer(scores)), dtype=np.float64)[0]
        assert np.ptp(got, axis=1).max() == 0, "keras-hub: every query row is the same"
        np.testing.assert_allclose(_last_row(case, p), got[:, 0, :], rtol=1e-14, atol=1e-14,
                                   err_msg=name)
        if p["form"] == "causal":  # each causal row differs from keras-hub's by a constant
            shift = case.output - got
            np.testing.assert_allclose(shift, np.broadcast_to(shift[..., :1], shift.shape),
                                       rtol=0, atol=1e-13, err_msg=name)
        compared += 1
    assert compared >= 10
    for name, case, p in _golden_cases("alibi_slopes"):
        layer = keras_hub.layers.AlibiBias(alibi_bias_max=p["max_bias"], dtype="float64")
        np.testing.assert_allclose(case.output, layer._get_slopes(p["num_heads"]), rtol=1e-14,
                                   atol=0, err_msg=name)


# --------------------------------------------------------------------------------------------
# broken implementations fail the properties (no goldens involved)
# --------------------------------------------------------------------------------------------

_IMPL = public_functions()


def _naive_slopes(num_heads: int, *, max_bias: float = 8.0, **kw: Any) -> Any:
    """The classic port bug: 2**(-max_bias*h/n) for every n, as if n were a power of two."""
    values = 2.0 ** (-max_bias * np.arange(1, num_heads + 1) / num_heads)
    return np.asarray(values, dtype=kw.get("dtype") or np.float32)


def _bias_queries_at_start(num_heads: int, q_len: int, k_len: int, **kw: Any) -> Any:
    """Queries at positions 0..q_len-1 instead of the last q_len (a KV-cache bug)."""
    full = _IMPL["alibi_bias"](num_heads, k_len, k_len, **kw)
    return full if full.shape[1] == 1 else full[:, :q_len]


def _bias_key_minus_query(num_heads: int, q_len: int, k_len: int, **kw: Any) -> Any:
    """-m * (j - i): the sign convention of T5/Shaw applied to ALiBi."""
    bias = _IMPL["alibi_bias"](num_heads, q_len, k_len, **kw)
    return bias if kw.get("form") == "key_only" else -bias


def _failing_properties(**overrides: Any) -> set[str]:
    return failing_properties(["alibi_slopes", "alibi_bias"], name="broken_alibi", **overrides)


def test_unbroken_backend_passes_the_properties() -> None:
    assert _failing_properties() == set()


def test_naive_slopes_fail_the_sequence_property() -> None:
    assert _failing_properties(alibi_slopes=_naive_slopes) == {
        "alibi_slopes_sequence", "alibi_slopes_sequence[max_bias=4.0]"}


def test_queries_at_the_start_fail_the_kv_cache_property() -> None:
    assert _failing_properties(alibi_bias=_bias_queries_at_start) == {
        "alibi_kv_cache_alignment[form=causal]", "alibi_kv_cache_alignment[form=symmetric]",
        "alibi_bias_relative[form=causal]", "alibi_bias_relative[form=symmetric]"}


def test_flipped_sign_fails_the_relative_and_softmax_properties() -> None:
    assert {"alibi_bias_relative[form=causal]", "alibi_causal_key_only_softmax"} <= \
        _failing_properties(alibi_bias=_bias_key_minus_query)
