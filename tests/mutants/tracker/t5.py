"""T5 relative-bucket porting bugs: the clamp, max_exact, the sign and the direction."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .registry import IMPL, Group, like

MUTANTS = Group()


def _t5_float_bucket(rel: np.ndarray, bidirectional: bool, num_buckets: int, max_distance: int,
                     *, clamp: bool = True, max_exact_of: Callable[[int], int] = lambda b: b // 2,
                     ) -> np.ndarray:
    """transformers' _relative_position_bucket, with switches for the reported variants."""
    rel = np.asarray(rel, dtype=np.int64)
    out = np.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        out += (rel > 0).astype(np.int64) * num_buckets
        n = np.abs(rel)
    else:
        n = -np.minimum(rel, 0)
    max_exact = max_exact_of(num_buckets)
    is_small = n < max_exact
    safe = np.maximum(n, 1).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        large = max_exact + (np.log(safe / max_exact) / math.log(max_distance / max_exact)
                             * (num_buckets - max_exact)).astype(np.int64)
    if clamp:
        large = np.minimum(large, num_buckets - 1)
    return out + np.where(is_small, n, large)


def _t5_overrides(**bucket_kw: Any) -> dict[str, Callable]:
    def bucket(relative_position: Any, *, bidirectional: bool = True, num_buckets: int = 32,
               max_distance: int = 128) -> Any:
        right = IMPL["t5_bucket"](relative_position, bidirectional=bidirectional,
                                  num_buckets=num_buckets, max_distance=max_distance)
        return like(right, _t5_float_bucket(relative_position, bidirectional, num_buckets,
                                            max_distance, **bucket_kw))

    def bias(q_len: int, k_len: int, table: Any, *, bidirectional: bool = True,
             num_buckets: int = 32, max_distance: int = 128, query_offset: int = 0) -> Any:
        right = IMPL["t5_bias"](q_len, k_len, table, bidirectional=bidirectional,
                                num_buckets=num_buckets, max_distance=max_distance,
                                query_offset=query_offset)
        rel = np.arange(k_len)[None, :] - (query_offset + np.arange(q_len))[:, None]
        buckets = _t5_float_bucket(rel, bidirectional, num_buckets, max_distance, **bucket_kw)
        rows = np.asarray(table)
        buckets = np.clip(buckets, 0, rows.shape[0] - 1)  # an index error would be obvious
        return like(right, np.moveaxis(rows[buckets], -1, 0))

    return {"t5_bucket": bucket, "t5_bias": bias}


def _t5_sign_flipped() -> dict[str, Callable]:
    def bucket(relative_position: Any, **kw: Any) -> Any:
        return IMPL["t5_bucket"](-np.asarray(relative_position), **kw)

    def bias(q_len: int, k_len: int, table: Any, *, bidirectional: bool = True,
             num_buckets: int = 32, max_distance: int = 128, query_offset: int = 0) -> Any:
        right = IMPL["t5_bias"](q_len, k_len, table, bidirectional=bidirectional,
                                num_buckets=num_buckets, max_distance=max_distance,
                                query_offset=query_offset)
        rel = (query_offset + np.arange(q_len))[:, None] - np.arange(k_len)[None, :]
        buckets = np.asarray(IMPL["t5_bucket"](rel, bidirectional=bidirectional,
                                               num_buckets=num_buckets,
                                               max_distance=max_distance))
        return like(right, np.moveaxis(np.asarray(table)[buckets], -1, 0))

    return {"t5_bucket": bucket, "t5_bias": bias}


def _t5_always_bidirectional() -> dict[str, Callable]:
    def bucket(relative_position: Any, *, bidirectional: bool = True, num_buckets: int = 32,
               **kw: Any) -> Any:
        return IMPL["t5_bucket"](relative_position, bidirectional=num_buckets % 2 == 0,
                                 num_buckets=num_buckets, **kw)

    def bias(q_len: int, k_len: int, table: Any, *, bidirectional: bool = True,
             num_buckets: int = 32, **kw: Any) -> Any:
        return IMPL["t5_bias"](q_len, k_len, table, bidirectional=num_buckets % 2 == 0,
                               num_buckets=num_buckets, **kw)

    return {"t5_bucket": bucket, "t5_bias": bias}


MUTANTS.add("t5_bucket_unclamped",
            "huggingface/candle#1312: the min(..., num_buckets - 1) of the log buckets left out",
            ("t5_bucket", "t5_bias"), **_t5_overrides(clamp=False))
MUTANTS.add("t5_max_exact_not_halved",
            "lucidrains/video-diffusion-pytorch#11: max_exact = buckets per side (the proposed "
            "'duplicate halving' fix)", ("t5_bucket", "t5_bias"),
            **_t5_overrides(max_exact_of=lambda b: b))
MUTANTS.add("t5_relative_sign_flipped",
            "lucidrains/x-transformers#10: relative position taken as query - key (sign flipped)",
            ("t5_bucket", "t5_bias"), **_t5_sign_flipped())
MUTANTS.add("t5_decoder_bidirectional",
            "huggingface/transformers#8518: a bidirectional bias used where attention is causal",
            ("t5_bucket", "t5_bias"), **_t5_always_bidirectional())
