"""Transforms of the query temperature (``query_temperature``): position ids for cache
positions, the +1 left out."""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import Arrays, Reference, Transform, call, register


def _position_ids_for_cache(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    """Llama 4's form driven by each batch row's position ids (row by row)."""
    ids = inputs.get("position_ids")
    if ids is None:
        return call(ref, inputs, params)
    rows = [call(ref, {"cache_position": row, "position_ids": None}, params)
            for row in np.asarray(ids)]
    return np.stack(rows)


def _without_plus_one(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    """floor(cache_position / F): Ministral 3's form over the cache positions."""
    out = np.asarray(call(ref, {**inputs, "position_ids": None},
                          {**params, "form": "ministral3"}))
    ids = inputs.get("position_ids")
    return out if ids is None else np.broadcast_to(out, np.shape(ids)).copy()


register(
    position_ids_for_cache_position=Transform(
        "position_ids in place of cache_position", _position_ids_for_cache,
        inputs=("cache_position", "position_ids"), modules=("query_temperature",)),
    temperature_without_plus_one=Transform(
        "floor(cache_position / F)", _without_plus_one, inputs=("cache_position",),
        params=("form",), modules=("query_temperature",)),
)
