"""deberta_bucket / deberta_scores argument checks on every backend: bad parameters and arrays,
the distance range an eager call checks, narrow integer dtypes, and empty shapes."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.backends import get_backend
from posenc.errors import ParameterError, PositionOutOfRangeError

REL = np.arange(-5, 6)
Q = np.zeros((2, 3, 4))
K = np.zeros((2, 5, 4))
T16 = np.zeros((16, 4))  # 2·span rows for position_buckets=8
SMALL = {"position_buckets": 8, "max_relative_positions": 12}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bucket_size": 7}, r"bucket_size=7 must be an even integer >= 2"),
        ({"bucket_size": 0}, r"bucket_size=0 must be an even integer >= 2"),
        ({"bucket_size": -4}, r"bucket_size=-4 must be an even integer >= 2"),
        ({"bucket_size": 256.0}, r"bucket_size must be an int, got 256.0 \(float\)"),
        ({"bucket_size": True}, r"bucket_size must be an int, got True \(bool\)"),
        ({"max_position": 129}, r"max_position=129 must be >= bucket_size/2 \+ 2 = 130: the "
                                r"bucket divides by ln\(\(max_position − 1\)/\(bucket_size/2\)\)"),
        ({"bucket_size": 8, "max_position": 4}, r"max_position=4 must be >= bucket_size/2 \+ 2 = 6"),
        ({"max_position": "512"}, r"max_position must be an int, got '512' \(str\)"),
        ({"clamp": "microsoft"}, r"clamp='microsoft' is not one of 'transformers', 'original'"),
        ({"clamp": None}, r"clamp=None is not one of 'transformers', 'original'"),
    ],
)
def test_bucket_bad_parameters(pe, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.deberta_bucket(REL, **kwargs)


@pytest.mark.parametrize(
    ("rel", "message"),
    [
        (np.array([1.0, -2.0]), r"relative_position must have a signed integer dtype \(query − "
                                r"key distances\), got float(64|32)"),
        (np.array([True, False]), r"relative_position must have a signed integer dtype .*, "
                                  r"got bool"),
    ],
)
def test_bucket_non_integer_positions(pe, rel, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.deberta_bucket(rel)


def test_bucket_range_is_checked_in_eager_mode() -> None:
    """Distances are exact up to 2**31 − 1; beyond, and for the dtype's minimum (whose
    magnitude is not representable), an eager call raises instead of returning a wrong bucket.
    With clamp='original' every distance is clamped first and fine."""
    import posenc

    # x = 127·ln((2^31 − 1)/128)/ln(511/128) = 127·16.6356/1.38434 = 1526.2: bucket 128 + 1527
    ok = np.array([-(2**31 - 1), 2**31 - 1])
    np.testing.assert_array_equal(posenc.deberta_bucket(ok), [-1655, 1655])
    with pytest.raises(PositionOutOfRangeError, match=r"relative_position contains 2147483648, "
                                                      r"outside the valid range \[-2147483647, "
                                                      r"2147483648\)"):
        posenc.deberta_bucket(np.array([0, 2**31]))
    with pytest.raises(PositionOutOfRangeError, match=r"relative_position contains -128"):
        posenc.deberta_bucket(np.array([-128, 5], np.int8), bucket_size=8, max_position=16)
    far = np.array([-(2**62), 2**62])
    np.testing.assert_array_equal(posenc.deberta_bucket(far, clamp="original"), [-255, 255])
    # a degenerate configuration: ratio 34/33, 4096 log buckets are reached at |r| = 1507
    with pytest.raises(PositionOutOfRangeError, match=r"contains -1600, outside the valid range "
                                                      r"\[-1506, 1507\)"):
        posenc.deberta_bucket(np.array([-1600]), bucket_size=66, max_position=35)


def _native(pe, values: np.ndarray, dtype: str):
    """``values`` as a ``dtype`` array of pe's framework (skipped where it has none), passed to
    posenc's functions directly (pe's functions convert NumPy integers to the index dtype)."""
    backend = get_backend(pe.__name__.rsplit(".", 1)[-1])
    out = backend.from_numpy(values, dtype, None)
    if not np.array_equal(backend.to_numpy(out), values) or dtype not in str(out.dtype):
        pytest.skip(f"{backend.name} holds no {dtype} array here")
    return backend, out


@pytest.mark.parametrize("dtype", ["int8", "int16"])
@pytest.mark.parametrize(("bucket_size", "max_position", "clamp"),
                         [(256, 512, "transformers"), (8, 16, "transformers"),
                          (64, 512, "original"), (32, 100, "transformers")])
def test_bucket_narrow_integers_match_the_reference(pe, dtype, bucket_size, max_position,
                                                    clamp) -> None:
    """int8/int16 distances get the buckets of the same distances in Python integers (the
    NumPy reference): mid + count and the comparison with mid must not wrap in the narrow dtype."""
    import posenc
    from posenc.reference import deberta as reference

    top = np.iinfo(dtype).max
    values = np.unique(np.concatenate([np.arange(-130, 131), [-top, -top + 1, top - 1, top]])
                       .clip(-top, top)).astype(dtype)
    backend, rel = _native(pe, values, dtype)
    out = posenc.deberta_bucket(rel, bucket_size=bucket_size, max_position=max_position,
                                clamp=clamp)
    assert dtype in str(out.dtype)
    expected = reference.deberta_bucket(values, bucket_size=bucket_size,
                                        max_position=max_position, clamp=clamp)
    np.testing.assert_array_equal(backend.to_numpy(out), expected)


def test_bucket_beyond_the_dtype_is_refused(pe) -> None:
    """A configuration whose buckets outgrow int8 (|r| = 127 is bucket 2479 here) is refused
    for int8 distances, naming the parameters and the dtype, instead of wrapping."""
    import posenc
    from posenc.reference import deberta as reference

    assert reference.bucket(127, 200, 102, "transformers") > 127
    _, rel = _native(pe, np.array([1, -1], np.int8), "int8")
    with pytest.raises(ParameterError, match=r"bucket_size=200 and max_position=102 \(clamp="
                                             r"'transformers'\) give buckets up to ±\d+ for int8 "
                                             r"relative positions, beyond the int8 range"):
        posenc.deberta_bucket(rel, bucket_size=200, max_position=102)
    # clamped to ±101 first, the buckets stay within ±199: still beyond int8
    with pytest.raises(ParameterError, match=r"clamp='original'\) give buckets up to ±199 for "
                                             r"int8"):
        posenc.deberta_bucket(rel, bucket_size=200, max_position=102, clamp="original")


def test_scores_zero_width_queries_need_an_explicit_scale(pe) -> None:
    q, k = np.ones((3, 0)), np.ones((2, 0))
    with pytest.raises(ParameterError, match=r"q has shape \(3, 0\): its last dim d = 0 has no "
                                             r"default scale"):
        pe.deberta_scores(q, k)
    out = get_backend(pe.__name__.rsplit(".", 1)[-1]).to_numpy(pe.deberta_scores(q, k, scale=1.0))
    np.testing.assert_array_equal(out, np.zeros((3, 2)))  # empty dot products


def test_bucket_traced_dtype_minimum_gets_the_last_bucket() -> None:
    """Inside jax.jit the range cannot be checked: the int32 minimum, whose magnitude int32 does
    not hold, gets the last bucket of the table (that of −(2**31 − 1)), not a wrapped value."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    import posenc

    edge = np.array([-(2**31) + 1, 2**31 - 1], np.int64)
    expected = np.asarray(posenc.deberta_bucket(edge))  # eager, in int64
    rel = jnp.asarray(np.array([-(2**31), 2**31 - 1]), dtype=jnp.int32)
    out = jax.jit(posenc.deberta_bucket)(rel)
    assert out.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(out), expected)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((Q, K, np.zeros((15, 4))), {}, r"rel_k has shape \(15, 4\): expected 2·span = 16 rows "
                                        r"\(axis -2\) for position_buckets=8"),
        ((Q, K, None, np.zeros((2, 12, 4))), {}, r"rel_q has shape \(2, 12, 4\): expected 2·span "
                                                 r"= 16 rows"),
        ((Q, K, np.zeros((16, 4))), {"position_buckets": 0, "max_relative_positions": 4},
         r"rel_k has shape \(16, 4\): expected 2·span = 8 rows \(axis -2\) for "
         r"max_relative_positions=4 \(position_buckets=0 <= 0\)"),
        ((Q, K, np.zeros((16, 3))), {}, r"q, k and the relative tables must share the last dim "
                                        r"d, got shapes q \(2, 3, 4\), k \(2, 5, 4\), rel_k "
                                        r"\(16, 3\)"),
        ((Q, K[..., :3]), {}, r"must share the last dim d, got shapes q \(2, 3, 4\), k \(2, 5, 3\)"),
        ((Q, np.zeros((3, 5, 4)), T16), {}, r"batch dims do not broadcast: q \(2,\), k \(3,\)"),
        ((Q, K, np.zeros((3, 16, 4))), {}, r"batch dims do not broadcast: q \(2,\), k "
                                           r"\(2,\), rel_k \(3,\): the last batch dim differs"),
        ((Q[0, 0], K, T16), {}, r"q must have at least 2 dims \[..., rows, d\], got shape \(4,\)"),
        ((Q, K, T16[0]), {}, r"rel_k must have at least 2 dims"),
        ((Q.astype(int), K, T16), {}, r"q must have a real floating dtype, got int(64|32)"),
        ((Q, K, T16.astype(int)), {}, r"rel_k must have a real floating dtype, got int(64|32)"),
        ((Q, K, T16), {"position_buckets": 7}, r"position_buckets=7 must be an even integer >= 2"),
        ((Q, K, T16), {"max_relative_positions": 5},
         r"max_relative_positions=5 must be >= position_buckets/2 \+ 2 = 6"),
        ((Q, K, T16), {"position_buckets": -1, "max_relative_positions": 0},
         r"max_relative_positions=0 must be >= 1"),
        ((Q, K, T16), {"position_buckets": 8.0}, r"position_buckets must be an int, got 8.0"),
        ((Q, K, T16), {"clamp": "clip"}, r"clamp='clip' is not one of 'transformers', 'original'"),
        ((Q, K, T16), {"scale": 0.0}, r"scale=0.0 must be a finite number > 0 \(or None\)"),
        ((Q, K, T16), {"scale": float("nan")}, r"scale=nan must be a finite number > 0"),
        ((Q, K, T16), {"scale": True}, r"scale=True must be a finite number > 0"),
    ],
)
def test_scores_bad_inputs(pe, args, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.deberta_scores(*args, **{**SMALL, **kwargs})


def test_scores_mixed_dtypes() -> None:
    """(NumPy only: the JAX backend converts float64 inputs to float32 without x64.)"""
    import posenc

    with pytest.raises(ParameterError, match=r"q, k and the relative tables must share one "
                                             r"dtype, but q is float64, k is float64, rel_k is "
                                             r"float32"):
        posenc.deberta_scores(Q, K, T16.astype(np.float32), **SMALL)
    with pytest.raises(ParameterError, match=r"but q is float32, k is float64"):
        posenc.deberta_scores(Q.astype(np.float32), K)


def test_empty_shapes(pe) -> None:
    """Empty query or key lengths give empty [..., q_len, k_len] scores; empty distances give
    empty buckets."""
    table = np.zeros((16, 4), np.float32)
    for q_len, k_len in ((0, 5), (3, 0), (0, 0)):
        out = pe.deberta_scores(np.zeros((2, q_len, 4), np.float32),
                                np.zeros((2, k_len, 4), np.float32), table, table, **SMALL)
        assert tuple(out.shape) == (2, q_len, k_len)
    assert tuple(pe.deberta_bucket(np.zeros((0, 3), np.int64)).shape) == (0, 3)
