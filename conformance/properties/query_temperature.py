"""Properties of the query temperature: a staircase in the log of the step, and Llama 4's
independence from position_ids."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from ..context import Context
from . import register


def _params(ctx: Context) -> tuple[str, int, float]:
    p = ctx.params
    return p.get("form", "llama4"), int(p.get("floor_scale", 8192)), float(p.get("scale", 0.1))


@register("query_temperature_steps")
def steps(ctx: Context) -> None:
    """The temperature is constant within a step of floor_scale ids and jumps at its edges to
    1 + s·ln(1 + k) (float64 truth computed here): for llama4 the k-th step starts at cache
    position k·F − 1, for ministral3 at position id k·F."""
    form, floor_scale, scale = _params(ctx)
    offset = 1 if form == "llama4" else 0

    @ctx.given(step=st.integers(1, 2000))
    def check(step: int) -> None:
        edge = step * floor_scale - offset  # the first id of step `step`
        ids = np.array([edge - 1, edge, edge + 1, edge + floor_scale - 1], np.int64)
        ids = ids[ids >= 0]
        inputs = {"cache_position": ids, "position_ids": None}
        out = ctx.run(inputs)
        truth = np.array([1 + scale * math.log(1 + (int(i) + offset) // floor_scale)
                          for i in ids])
        ctx.assert_close(out, truth, f"temperature at ids {ids.tolist()} (step {step})",
                         scale=float(np.abs(truth).max()))


@register("query_temperature_llama4_follows_cache")
def llama4_follows_cache(ctx: Context) -> None:
    """Llama 4's temperature depends on cache_position only: any position_ids (a left-padded
    batch) give each batch row the cache's temperatures, bit for bit."""

    @ctx.given(start=st.integers(0, 2**20), pad=st.integers(1, 40))
    def check(start: int, pad: int) -> None:
        cache = np.arange(start, start + 6, dtype=np.int64)
        ids = np.stack([cache, np.maximum(cache - pad, 0)])
        alone = ctx.run({"cache_position": cache, "position_ids": None}, floor_scale=4)
        batched = ctx.run({"cache_position": cache, "position_ids": ids}, floor_scale=4)
        ctx.assert_equal(batched, np.broadcast_to(alone, ids.shape),
                         f"rows with position_ids {ids.tolist()}")
