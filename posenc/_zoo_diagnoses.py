"""Diagnosis transforms of the 2024–26 model-zoo encodings (NoPE, query temperature, layer
schedules, MLA, vision and multimodal rope): registered into :data:`posenc.diagnoses.TRANSFORMS`."""

from __future__ import annotations

from typing import Any

import numpy as np

from .diagnoses import Arrays, Reference, Transform, _call, _positions


def _rope_on_nope(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    from .reference.rope import rope

    x = np.asarray(_call(ref, inputs, params))
    return rope(x, _positions(inputs), base=10000.0, layout="half", rotary_dim=None,
                scaling=None, seq_len=None)


def _position_ids_for_cache(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    """Llama 4's form driven by each batch row's position ids (row by row)."""
    ids = inputs.get("position_ids")
    if ids is None:
        return _call(ref, inputs, params)
    rows = [_call(ref, {"cache_position": row, "position_ids": None}, params)
            for row in np.asarray(ids)]
    return np.stack(rows)


def _without_plus_one(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    """floor(cache_position / F): Ministral 3's form over the cache positions."""
    out = np.asarray(_call(ref, {**inputs, "position_ids": None},
                           {**params, "form": "ministral3"}))
    ids = inputs.get("position_ids")
    return out if ids is None else np.broadcast_to(out, np.shape(ids)).copy()


TRANSFORMS: dict[str, Transform] = {
    "rope_on_nope_layer": Transform("RoPE (theta 10000, half) applied", _rope_on_nope,
                                    inputs=("x",), modules=("nope",)),
    "position_ids_for_cache_position": Transform(
        "position_ids in place of cache_position", _position_ids_for_cache,
        inputs=("cache_position", "position_ids"), modules=("query_temperature",)),
    "temperature_without_plus_one": Transform(
        "floor(cache_position / F)", _without_plus_one, inputs=("cache_position",),
        params=("form",), modules=("query_temperature",)),
}
