"""deberta_bucket: DeBERTa's log buckets (transformers' make_log_bucket_position) in float64 NumPy,
with an exact integer comparison where the log ratio falls on an integer, the v3 defaults by
hand, and the 'original' clamp."""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc

from .mirror import golden_cases, implementation


def _ceil_log(a: int, mid: int, max_position: int) -> int:
    """ceil((mid - 1) ln(a/mid) / ln((M - 1)/mid)); near an integer n, x > n is decided as
    a^(mid-1) mid^n > (M - 1)^n mid^(mid-1) in integers."""
    x = (mid - 1) * math.log(a / mid) / math.log((max_position - 1) / mid)
    n = round(x)
    if abs(x - n) < 1e-9:
        return n + 1 if a ** (mid - 1) * mid ** n > (max_position - 1) ** n * mid ** (mid - 1) else n
    return math.ceil(x)


def expected_buckets(relative: np.ndarray, bucket_size: int, max_position: int,
                     clamp: str) -> np.ndarray:
    mid = bucket_size // 2

    def one(r: int) -> int:
        if clamp == "original":
            r = max(-(max_position - 1), min(max_position - 1, r))
        if abs(r) <= mid:
            return r
        return int(math.copysign(mid + _ceil_log(abs(r), mid, max_position), r))

    return np.vectorize(one, otypes=[np.int64])(np.asarray(relative, dtype=np.int64))


def test_v3_defaults_by_hand() -> None:
    """bucket_size 256, max_position 512: |r| <= 128 kept, 511 is the last bucket, 255; and
    129 is the first log bucket (x = 127 ln(129/128)/ln(511/128) = 0.71, ceil 1)."""
    rel = np.array([0, 5, -128, 129, -129, 511, -511, 2000])
    out = posenc.deberta_bucket(rel)
    np.testing.assert_array_equal(out[:7], [0, 5, -128, 129, -129, 255, -255])
    assert out[7] > 255  # transformers' clamp: no cap, the attention clips the row


@pytest.mark.parametrize("rel", [[2000], [-3000, -600], [600, 2**40]])
def test_original_clamp_accepts_distances_all_beyond_max_position(rel: list[int]) -> None:
    """Clamped first to ±511, every one of them is the last bucket, ±255 (posenc raised
    PositionOutOfRangeError when the smallest distance too lay beyond +511)."""
    out = posenc.deberta_bucket(np.array(rel, dtype=np.int64), clamp="original")
    np.testing.assert_array_equal(out, np.sign(rel) * 255)
    np.testing.assert_array_equal(out, expected_buckets(np.array(rel), 256, 512, "original"))


@pytest.mark.parametrize("case", golden_cases("deberta_bucket"), ids=lambda c: c.name)
def test_reference_and_implementation_match_the_log_bucket_rule(case) -> None:
    p = case.params
    expected = expected_buckets(case.inputs["relative_position"], p["bucket_size"],
                                p["max_position"], p["clamp"])
    np.testing.assert_array_equal(case.output, expected)
    np.testing.assert_array_equal(np.asarray(implementation("deberta_bucket", case)), expected)
