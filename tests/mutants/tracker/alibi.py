"""ALiBi porting bugs: slopes for head counts that are not powers of two, and distances
measured from the wrong place."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .registry import IMPL, Group, like

MUTANTS = Group()


def _geometric(n: int, max_bias: float, start: int = 1) -> np.ndarray:
    return 2.0 ** (-max_bias * np.arange(start, n + start) / n)


def _slopes_geometric_for_any_heads(n: int, max_bias: float) -> np.ndarray:
    return _geometric(n, max_bias)


def _slopes_exponent_off_by_one(n: int, max_bias: float) -> np.ndarray:
    closest = 2 ** int(math.log2(n))
    slopes = _geometric(closest, max_bias, start=0)
    extra = _geometric(2 * closest, max_bias, start=0)[0::2][: n - closest]
    return np.concatenate([slopes, extra])


def _slopes_even_extra_heads(n: int, max_bias: float) -> np.ndarray:
    closest = 2 ** int(math.log2(n))
    extra = _geometric(2 * closest, max_bias)[1::2][: n - closest]  # should be [0::2]
    return np.concatenate([_geometric(closest, max_bias), extra])


def _alibi_with_slopes(slopes_fn: Callable[[int, float], np.ndarray]) -> dict[str, Callable]:
    def slopes(num_heads: int, *, max_bias: float = 8.0, **kw: Any) -> Any:
        right = IMPL["alibi_slopes"](num_heads, max_bias=max_bias, **kw)
        return like(right, slopes_fn(num_heads, max_bias))

    def bias(num_heads: int, q_len: int, k_len: int, *, max_bias: float = 8.0, **kw: Any) -> Any:
        right = IMPL["alibi_bias"](num_heads, q_len, k_len, max_bias=max_bias, **kw)
        true = IMPL["alibi_slopes"](num_heads, max_bias=max_bias)
        ratio = slopes_fn(num_heads, max_bias) / np.asarray(true, dtype=np.float64)
        return like(right, np.asarray(right, dtype=np.float64) * ratio[:, None, None])

    return {"alibi_slopes": slopes, "alibi_bias": bias}


MUTANTS.add("alibi_geometric_for_any_heads",
            "ml-explore/mlx#3071: 2^(-8h/n) for every n, right only when n is a power of two",
            ("alibi_slopes", "alibi_bias"), **_alibi_with_slopes(_slopes_geometric_for_any_heads))
MUTANTS.add("alibi_slope_exponent_off_by_one",
            "paiml/aprender#2143: slopes 2^(-8h/n) from h = 0 (head 0 gets slope 1)",
            ("alibi_slopes", "alibi_bias"), **_alibi_with_slopes(_slopes_exponent_off_by_one))
MUTANTS.add("alibi_even_extra_heads",
            "NVIDIA/TensorRT-LLM#1611: extra heads of a non-power-of-two count take the wrong half "
            "of the 2n sequence (slopes not decreasing)",
            ("alibi_slopes", "alibi_bias"), **_alibi_with_slopes(_slopes_even_extra_heads))


def _alibi_distance_off_by_one(num_heads: int, q_len: int, k_len: int, *,
                               form: str = "causal", max_bias: float = 8.0, **kw: Any) -> Any:
    right = IMPL["alibi_bias"](num_heads, q_len, k_len, form=form, max_bias=max_bias, **kw)
    if form == "symmetric":
        return right
    slopes = np.asarray(IMPL["alibi_slopes"](num_heads, max_bias=max_bias), dtype=np.float64)
    return like(right, np.asarray(right, dtype=np.float64) - slopes[:, None, None])


def _alibi_queries_from_the_start(num_heads: int, q_len: int, k_len: int, *,
                                  form: str = "causal", max_bias: float = 8.0, **kw: Any) -> Any:
    right = IMPL["alibi_bias"](num_heads, q_len, k_len, form=form, max_bias=max_bias, **kw)
    if form == "key_only" or q_len == k_len:
        return right
    slopes = np.asarray(IMPL["alibi_slopes"](num_heads, max_bias=max_bias), dtype=np.float64)
    distance = np.arange(q_len)[:, None] - np.arange(k_len)[None, :]  # query r at position r
    distance = np.abs(distance) if form == "symmetric" else distance
    return like(right, -slopes[:, None, None] * distance)


MUTANTS.add("alibi_distance_off_by_one",
            "vllm-project/vllm#945: paged-attention ALiBi used token_idx - context_len (one short)",
            ("alibi_bias",), alibi_bias=_alibi_distance_off_by_one)
MUTANTS.add("alibi_cache_queries_at_start",
            "vllm-project/vllm#1009: with a KV cache the bias is measured from the first key, not "
            "from the query's own position",
            ("alibi_bias",), alibi_bias=_alibi_queries_from_the_start)
