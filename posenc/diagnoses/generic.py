"""Transforms any encoding may use: positions shifted or rounded, an input negated, the output
negated, doubled or reversed over heads, half the buckets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .base import Arrays, Reference, Transform, call, positions, register, round_significand


def _shift_positions(by: int) -> Callable[[Reference, Arrays, dict[str, Any]], Any]:
    def apply(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
        return call(ref, {**inputs, "positions": positions(inputs) + by}, params)
    return apply


def _positions_bfloat16(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    rounded = round_significand(positions(inputs), 8).astype(np.int64)
    return call(ref, {**inputs, "positions": rounded}, params)


def _negate(name: str) -> Callable[[Reference, Arrays, dict[str, Any]], Any]:
    def apply(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
        return call(ref, {**inputs, name: -np.asarray(inputs[name])}, params)
    return apply


def _negated_output(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    return -np.asarray(call(ref, inputs, params))


def _doubled_output(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    return 2 * np.asarray(call(ref, inputs, params))


def _heads_reversed(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    return np.asarray(call(ref, inputs, params))[::-1]


def _num_buckets_halved(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    return call(ref, inputs, {**params, "num_buckets": params["num_buckets"] // 2})


register(
    positions_plus_one=Transform("positions + 1", _shift_positions(1), inputs=("positions",)),
    positions_minus_one=Transform("positions − 1", _shift_positions(-1), inputs=("positions",)),
    positions_in_bfloat16=Transform("positions rounded to bfloat16", _positions_bfloat16,
                                    inputs=("positions",)),
    relative_position_negated=Transform("−relative_position", _negate("relative_position"),
                                        inputs=("relative_position",)),
    output_negated=Transform("the output negated", _negated_output),
    output_doubled=Transform("the output doubled", _doubled_output),
    heads_reversed=Transform("heads in reverse order", _heads_reversed, params=("num_heads",)),
    num_buckets_halved=Transform("num_buckets // 2", _num_buckets_halved,
                                 params=("num_buckets",)),
)
