"""Transforms of M-RoPE's position ids (``mrope_position_ids``): video frames one second apart."""

from __future__ import annotations

from typing import Any

from .base import Arrays, Reference, Transform, call, register


def _frames_at_one_second(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    """Video temporal ids without second_per_grid_ts (every temporal patch 1 s)."""
    return call(ref, {**inputs, "second_per_grid_ts": None}, params)


register(
    frames_at_one_second=Transform(
        "second_per_grid_ts dropped (1 s a temporal patch)", _frames_at_one_second,
        inputs=("second_per_grid_ts",), modules=("mrope_position_ids",)),
)
