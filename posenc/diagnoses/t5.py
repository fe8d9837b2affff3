"""Transforms of T5's relative buckets (``t5_bucket``, ``t5_bias``): the bucket's logarithm in
float32, buckets of query − key."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..reference.t5 import t5_bucket
from .base import Arrays, Reference, Transform, log_float32, register


def _t5_float32_bucket(rel: np.ndarray, bidirectional: bool, num_buckets: int,
                       max_distance: int) -> np.ndarray:
    """transformers' _relative_position_bucket, its logarithm evaluated in float32."""
    rel = np.asarray(rel, dtype=np.int64)
    out = np.zeros(rel.shape, dtype=np.int64)
    if bidirectional:
        num_buckets //= 2
        out += (rel > 0) * num_buckets
        n = np.abs(rel)
    else:
        n = np.maximum(-rel, 0)
    max_exact = num_buckets // 2
    with np.errstate(divide="ignore"):
        ratio = log_float32(n.astype(np.float32) / np.float32(max_exact))
    ratio = ratio / np.float32(math.log(max_distance / max_exact))
    with np.errstate(invalid="ignore"):  # log(0) = -inf, in the branch np.where drops
        large = max_exact + (ratio * np.float32(num_buckets - max_exact)).astype(np.int64)
    large = np.minimum(large, num_buckets - 1)
    return out + np.where(n < max_exact, n, large)


def _t5_float32_log(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    return _t5_float32_bucket(inputs["relative_position"], params["bidirectional"],
                              params["num_buckets"], params["max_distance"])


def _t5_bias_query_minus_key(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    table = np.asarray(inputs["table"], dtype=np.float64)
    queries = params["query_offset"] + np.arange(params["q_len"])
    rel = queries[:, None] - np.arange(params["k_len"])[None, :]  # query − key
    buckets = t5_bucket(rel, bidirectional=params["bidirectional"],
                        num_buckets=params["num_buckets"], max_distance=params["max_distance"])
    return np.moveaxis(table[buckets], -1, 0)


register(
    t5_float32_log=Transform("the bucket's logarithm in float32", _t5_float32_log,
                             inputs=("relative_position",), modules=("t5",)),
    t5_bias_query_minus_key=Transform("buckets of query − key", _t5_bias_query_minus_key,
                                      inputs=("table",), modules=("t5",)),
)
