"""deberta_bucket / deberta_scores against tables worked out by hand from the formula (not from
the code)."""

from __future__ import annotations

import math

import numpy as np
import pytest


def test_small_table_by_hand() -> None:
    """bucket_size 8, max_position 16: mid 4, ratio 15/4, x = 3·ln(a/4)/ln(3.75). Bucket 4 + n
    starts after a = 4·3.75^((n − 1)/3): 5 (> 4), 7 (> 6.21), 10 (> 9.66), 16 (> 15: the tie
    x = 3 at a = 15 stays in bucket 7), 24 (> 23.30)."""
    import posenc

    a = np.arange(0, 30)
    want = [0, 1, 2, 3, 4, 5, 5, 6, 6, 6, 7, 7, 7, 7, 7, 7, 8, 8, 8, 8, 8, 8, 8, 8,
            9, 9, 9, 9, 9, 9]
    got = posenc.deberta_bucket(a, bucket_size=8, max_position=16)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(posenc.deberta_bucket(-a, bucket_size=8, max_position=16),
                                  -np.array(want))
    clamped = posenc.deberta_bucket(a, bucket_size=8, max_position=16, clamp="original")
    np.testing.assert_array_equal(clamped, np.minimum(want, 7))


def test_v3_defaults_by_hand() -> None:
    """256 buckets, max 512: mid 128, x(a) = 127·ln(a/128)/ln(511/128); x(129) = 0.714,
    x(130) = 1.422, x(511) = 127 exactly, x(512) = 127.23."""
    import posenc

    rel = np.array([0, 128, -128, 129, 130, 511, -511, 512, -512])
    np.testing.assert_array_equal(posenc.deberta_bucket(rel),
                                  [0, 128, -128, 129, 130, 255, -255, 256, -256])
    np.testing.assert_array_equal(posenc.deberta_bucket(rel, clamp="original"),
                                  [0, 128, -128, 129, 130, 255, -255, 255, -255])


def test_integer_dtype_and_shape_are_kept() -> None:
    import posenc

    for dtype in (np.int8, np.int16, np.int32, np.int64):
        out = posenc.deberta_bucket(np.array([[-100, 0], [20, 100]], dtype), bucket_size=8,
                                    max_position=16)
        assert out.dtype == dtype and out.shape == (2, 2)
        # x(100) = 3·ln(25)/ln(3.75) = 7.31: bucket 4 + 8
        np.testing.assert_array_equal(out, [[-12, 0], [8, 12]])
    torch = pytest.importorskip("torch")
    out = posenc.deberta_bucket(torch.tensor([-512, 512], dtype=torch.int32))
    assert out.dtype == torch.int32 and out.tolist() == [-256, 256]


def test_scores_by_hand() -> None:
    """One query, three keys, d = 1, no buckets, span 1: rows c = clip(i − j + 1, 0, 1)."""
    import posenc

    q, k = np.array([[2.0]]), np.array([[1.0], [3.0], [5.0]])
    rel_k, rel_q = np.array([[10.0], [20.0]]), np.array([[100.0], [200.0]])
    # i − j = 0, −1, −2 -> rows 1, 0, 0
    got = posenc.deberta_scores(q, k, rel_k, rel_q, position_buckets=0,
                                max_relative_positions=1)
    want = np.array([[2 + 2 * 20 + 1 * 200, 6 + 2 * 10 + 3 * 100, 10 + 2 * 10 + 5 * 100]])
    np.testing.assert_allclose(got, want / math.sqrt(3), rtol=1e-15)
