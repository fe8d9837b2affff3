"""Transforms of ALiBi (``alibi_slopes``, ``alibi_bias``): other slope ladders, queries
counted from 0."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..reference.alibi import alibi_slopes
from .base import Arrays, Reference, Transform, call, register


def _rescale_slopes(variant: Callable[[int, float], np.ndarray]) -> Callable[..., Any]:
    """ALiBi outputs are linear in each head's slope: the reference's output, head by head,
    times variant slope / reference slope."""
    def apply(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
        heads, max_bias = params["num_heads"], params["max_bias"]
        ratio = variant(heads, max_bias) / alibi_slopes(num_heads=heads, max_bias=max_bias)
        out = np.asarray(call(ref, inputs, params))
        return out * ratio.reshape(-1, *([1] * (out.ndim - 1)))
    return apply


def _geometric(heads: int, max_bias: float) -> np.ndarray:
    return 2.0 ** (-max_bias * np.arange(1, heads + 1) / heads)


def _extra_slopes_even(heads: int, max_bias: float) -> np.ndarray:
    closest = 1 << (heads.bit_length() - 1)  # the largest power of two <= heads
    extra = _geometric(2 * closest, max_bias)[1::2][: heads - closest]
    return np.concatenate([_geometric(closest, max_bias), extra])


def queries_from_zero(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    """Queries at positions 0..q_len−1, not the last q_len: the first rows of the square bias.
    The reference (loops, for clarity) gives the bias of a query row at distance d from a key
    as a function of d alone, so the rows come from its one-query bias over the keys, each
    row read at its own distances: no k_len × k_len square (4096 keys decode in a case)."""
    if params["form"] == "key_only":
        return np.asarray(call(ref, inputs, params))
    q_len, k_len = params["q_len"], params["k_len"]
    # one query at position k_len − 1: column j holds the bias at distance d = k_len − 1 − j
    last = np.asarray(call(ref, inputs, {**params, "q_len": 1}))[:, 0, :]  # [heads, k_len]
    by_distance = last[:, ::-1]  # [heads, d] for d = 0 .. k_len − 1
    rows = np.arange(q_len)[:, None]
    keys = np.arange(k_len)[None, :]
    distance = rows - keys  # query r at position r, key j
    if params["form"] == "symmetric":
        return by_distance[:, np.abs(distance)]
    # causal, −slope·d: keys after the query (d < 0, masked in use) continue the line, whose
    # step −slope is the bias at distance 1 (the same product the reference rounds)
    inside = by_distance[:, distance.clip(min=0)]
    if k_len < 2:
        return inside
    step = by_distance[:, 1][:, None, None]
    return np.where(distance[None] >= 0, inside, step * distance[None])


register(
    alibi_geometric_slopes=Transform("slopes 2^(−max_bias·h/n) for every n",
                                     _rescale_slopes(_geometric), modules=("alibi",)),
    alibi_extra_slopes_even=Transform("extra slopes from the even powers",
                                      _rescale_slopes(_extra_slopes_even), modules=("alibi",)),
    alibi_queries_from_zero=Transform("queries at 0..q_len−1", queries_from_zero,
                                      params=("q_len", "k_len", "form"), modules=("alibi",)),
)
