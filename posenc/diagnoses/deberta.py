"""Transforms of DeBERTa's log buckets (``deberta_bucket``): another rounding of the log term,
or the log term in float32."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .base import Arrays, Reference, Transform, log_float32, register


def _deberta_log_bucket(rounding: Callable[[Any], Any], dtype: type) -> Callable[..., Any]:
    """transformers' make_log_bucket_position with another rounding or another float dtype."""
    log = log_float32 if dtype is np.float32 else np.log

    def apply(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
        rel = np.asarray(inputs["relative_position"], dtype=np.int64)
        mid, max_position = params["bucket_size"] // 2, params["max_position"]
        if params["clamp"] == "original":
            rel = np.clip(rel, -(max_position - 1), max_position - 1)
        magnitude = np.abs(rel).astype(dtype)
        with np.errstate(divide="ignore", invalid="ignore"):
            x = (log(magnitude / dtype(mid)) / log(np.asarray([(max_position - 1) / mid], dtype))
                 * dtype(mid - 1))
            bucket = (rounding(x).astype(np.int64) + mid) * np.sign(rel)
        return np.where(np.abs(rel) <= mid, rel, bucket)
    return apply


register(
    deberta_floor=Transform("floor of the log term", _deberta_log_bucket(np.floor, np.float64),
                            inputs=("relative_position",), modules=("deberta",)),
    deberta_float32_log=Transform("the log term in float32",
                                  _deberta_log_bucket(np.ceil, np.float32),
                                  inputs=("relative_position",), modules=("deberta",)),
)
