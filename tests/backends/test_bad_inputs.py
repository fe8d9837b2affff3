"""Bad input gets a clear error naming the parameter and the value, on every backend."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from posenc.errors import (
    MixedArrayLibrariesError,
    ParameterError,
    PositionOutOfRangeError,
)

X = np.zeros((2, 4, 8))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rotary_dim": 5}, r"rotary_dim=5 must be even"),
        ({"rotary_dim": 10}, r"rotary_dim=10 exceeds x.shape\[-1\]=8"),
        ({"rotary_dim": 0}, r"rotary_dim=0 must be >= 2"),
        ({"rotary_dim": 4.0}, r"rotary_dim must be an int, got 4.0"),
        ({"layout": "neox"}, r"layout='neox' is not one of 'half', 'interleaved'"),
        ({"base": -1.0}, r"base=-1.0 must be a finite number > 0"),
        ({"base": 1.0}, r"base=1.0 must be > 1"),
        ({"base": float("nan")}, r"base=nan must be a finite number > 0"),
        ({"positions": [0, 1, 2]}, r"positions has shape \(3,\) but x has shape \(2, 4, 8\)"),
        ({"positions": [[0, 1, 2, 3]] * 3}, r"positions has shape \(3, 4\)"),
    ],
)
def test_rope_bad_parameters(pe, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.rope(X, **kwargs)


def test_rope_odd_width(pe) -> None:
    with pytest.raises(ParameterError, match=r"x.shape\[-1\]=7 is odd"):
        pe.rope(np.zeros((3, 7)))


def test_rope_one_dimensional_x(pe) -> None:
    with pytest.raises(ParameterError, match=r"x must have shape \[..., seq, dim\], got shape "
                                             r"\(8,\)"):
        pe.rope(np.zeros(8))


def test_rope_positions_beyond_float32_exactness(pe) -> None:
    with pytest.raises(ParameterError, match=r"positions contains 16777217, beyond 2\*\*24"):
        pe.rope(np.zeros((2, 8), np.float32), positions=[0, 2**24 + 1])


def test_sinusoidal_bad_parameters(pe) -> None:
    with pytest.raises(ParameterError, match=r"dim=0 must be >= 1"):
        pe.sinusoidal([0, 1], 0)
    with pytest.raises(ParameterError, match=r"layout='sin' is not one of"):
        pe.sinusoidal([0, 1], 4, layout="sin")
    with pytest.raises(ParameterError, match=r"dim=1 must be >= 2 for layout='t2t'"):
        pe.sinusoidal([0, 1], 1, layout="t2t")
    with pytest.raises(ParameterError, match=r"dim must be an int, got True"):
        pe.sinusoidal([0, 1], True)


def test_learned_out_of_range_names_the_position(pe) -> None:
    table = np.zeros((10, 4))
    with pytest.raises(PositionOutOfRangeError, match=r"positions contains 10, outside the valid "
                                                      r"range \[0, 10\)"):
        pe.learned([0, 10, 3], table)
    with pytest.raises(PositionOutOfRangeError, match=r"positions contains -1"):
        pe.learned([[0, -1]], table)


@pytest.mark.parametrize("dtype", ["int8", "int16", "uint8", "uint16"])
def test_learned_narrow_integer_positions(pe, dtype) -> None:
    """Narrow positions give the rows of the same int64 positions on every backend (torch's
    index_select and TensorFlow's gather refuse them as indices), and the range check still
    names the value."""
    from posenc.backends import get_backend

    backend = get_backend(pe.__name__.rsplit(".", 1)[-1])
    table = np.arange(12.0, dtype=np.float32).reshape(6, 2)
    values = np.array([[0, 5], [3, 1]])
    native = backend.from_numpy(values, dtype, None)
    assert dtype in str(native.dtype)
    out = posenc.learned(native, backend.from_numpy(table, "float32", None))
    np.testing.assert_array_equal(backend.to_numpy(out), table[values])
    far = backend.from_numpy(np.array([0, 100]), dtype, None)
    with pytest.raises(PositionOutOfRangeError, match=r"positions contains 100, outside the "
                                                      r"valid range \[0, 6\)"):
        posenc.learned(far, backend.from_numpy(table, "float32", None))
    clipped = posenc.learned(far, backend.from_numpy(table, "float32", None), out_of_range="clip")
    np.testing.assert_array_equal(backend.to_numpy(clipped), table[[0, 5]])


def test_learned_bad_arguments(pe) -> None:
    with pytest.raises(ParameterError, match=r"table must have shape \[max_len, dim\], got shape "
                                             r"\(10,\)"):
        pe.learned([0], np.zeros(10))
    with pytest.raises(ParameterError, match=r"out_of_range='wrap' is not one of 'error', 'clip'"):
        pe.learned([0], np.zeros((10, 2)), out_of_range="wrap")
    with pytest.raises(ParameterError, match=r"positions must have an integer dtype, got float"):
        posenc.learned(np.array([0.0]), np.zeros((10, 2)))


def test_low_precision_positions_are_refused() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(ParameterError, match=r"positions must have an integer dtype \(or "
                                             r"float32/float64\), got bfloat16"):
        posenc.rope(torch.zeros(2, 8), torch.tensor([0, 1], dtype=torch.bfloat16))


def test_mixed_array_libraries() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(MixedArrayLibrariesError,
                       match=r"x is a torch array, positions is a numpy array"):
        posenc.rope(torch.zeros(2, 8), np.arange(2))
    with pytest.raises(MixedArrayLibrariesError, match=r"positions is a torch array, table is a "
                                                       r"numpy array"):
        posenc.learned(torch.arange(2), np.zeros((4, 2)))


def test_unsupported_array_type() -> None:
    class NotAnArray:
        shape = (2, 8)

    with pytest.raises(ParameterError, match=r"arrays of type .*NotAnArray are not supported"):
        posenc.rope(NotAnArray())


def test_errors_are_standard_exceptions_too() -> None:
    """Callers catching ValueError/IndexError/TypeError keep working."""
    with pytest.raises(ValueError):
        posenc.rope(np.zeros((2, 7)))
    with pytest.raises(IndexError):
        posenc.learned(np.array([5]), np.zeros((5, 2)))


def test_numpy_scalars_are_numbers(pe) -> None:
    """NumPy scalars (from configs read with NumPy) are valid numbers and switches: the
    results equal the ones for the Python values."""
    x = np.linspace(-1, 1, 2 * 4 * 8).reshape(2, 4, 8)
    want = np.asarray(pe.rope(x, base=10000))
    np.testing.assert_array_equal(np.asarray(pe.rope(x, base=np.int64(10000))), want)
    np.testing.assert_array_equal(np.asarray(pe.rope(x, base=np.float32(10000))), want)
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    np.testing.assert_array_equal(
        np.asarray(pe.rope(x, scaling={**yarn, "truncate": np.bool_(False)})),
        np.asarray(pe.rope(x, scaling={**yarn, "truncate": False})))


def test_layer_sizes_are_checked_at_construction() -> None:
    """A size is an int >= 1 and a switch is a bool: nothing is truncated or taken as truthy."""
    from posenc.layers import all_layers

    t5 = all_layers()["T5RelativeBias"]
    deberta = all_layers()["DebertaRelativeScores"]
    for value, message in ((2.5, r"num_heads must be an int, got 2.5 \(float\)"),
                           (True, r"num_heads must be an int, got True \(bool\)"),
                           ("4", r"num_heads must be an int, got '4' \(str\)"),
                           (0, r"num_heads=0 must be >= 1")):
        with pytest.raises(ParameterError, match=rf"T5RelativeBias: {message}"):
            t5.resolve_config({"num_heads": value})
    assert t5.resolve_config({"num_heads": np.int64(4)})["num_heads"] == 4
    with pytest.raises(ParameterError, match=r"c2p must be a bool, got 'no' \(str\)"):
        deberta.resolve_config({"head_dim": 4, "c2p": "no"})
    assert deberta.resolve_config({"head_dim": 4, "c2p": np.bool_(False)})["c2p"] is False
    shaw = all_layers()["ShawRelativeAttention"]
    assert shaw.resolve_config({"head_dim": 4, "max_relative_position": 2})["value_dim"] is None
    with pytest.raises(ParameterError, match=r"unknown argument\(s\) bogus"):
        all_layers()["LearnedPositionEmbedding"].config_from_weights({}, {"bogus": 1})


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_float_positions(pe, bad) -> None:
    positions = np.array([0.0, 1.5, bad, 3.0], np.float32)
    for fn in (lambda p: pe.rope(X.astype(np.float32), p),
               lambda p: pe.sinusoidal(p, 8)):
        with pytest.raises(ParameterError, match=rf"positions contains {bad}: positions must be"
                                                 " finite"):
            fn(positions)


def test_float64_positions_beyond_exact_integers(pe) -> None:
    """2**53 + 2 is not 2**53 + 1 rounded: float64 positions stop being exact at 2**53."""
    x = pe.BACKEND.from_numpy(X, "float64", None)
    positions = pe.BACKEND.from_numpy(np.array([0, 1, 2, 2**53 + 2]), "int64", None)
    if "float64" not in str(x.dtype) or "64" not in str(positions.dtype):
        pytest.skip("this backend runs without 64-bit types (JAX without x64)")
    with pytest.raises(ParameterError, match=r"positions contains 9007199254740994, beyond 2\*\*53"):
        pe.rope(x, positions)


def test_converted_lists_and_numpy_arrays(pe) -> None:
    """The backend modules convert lists and NumPy arrays: integers that do not fit the index
    dtype are an error (they would wrap), ragged or non-numeric lists too; an empty list is
    an empty index array."""
    table = np.arange(8.0).reshape(4, 2).astype(np.float32)
    with pytest.raises(ParameterError, match=r"positions contains 9223372036854775808, outside "
                                             r"the range of int(32|64)"):
        pe.learned(np.array([1, 2**63], np.uint64), table, out_of_range="clip")
    with pytest.raises(ParameterError, match=r"positions is not a rectangular array"):
        pe.rope(np.zeros((2, 8)), [[0], [1, 2]])
    with pytest.raises(ParameterError, match=r"positions must hold numbers, got a <U1 array"):
        pe.rope(np.zeros((2, 8)), ["a", "b"])
    assert tuple(pe.learned([], table).shape) == (0, 2)
    np.testing.assert_array_equal(
        np.asarray(pe.learned(np.array([3, 0], np.uint8), table)), table[[3, 0]])


def test_numpy_dtypes_name_the_backend_dtype(pe) -> None:
    """np.float32 (or np.dtype("float32")) passed as dtype= selects the backend's float32."""
    want = np.asarray(pe.sinusoidal([0, 1, 2], 8, dtype="float32"))
    for dtype in (np.float32, np.dtype("float32")):
        out = pe.sinusoidal([0, 1, 2], 8, dtype=dtype)
        assert "float32" in str(out.dtype)
        np.testing.assert_array_equal(np.asarray(out), want)
