"""Torch backends whose FlexAttention score_mod factories carry porting bugs: T5's relative
position taken as query − key, ALiBi's queries aligned to the start of the KV cache, and a
score_mod that is right but holds the materialised [heads, q_len, k_len] bias. Imports torch:
import this module only where torch is installed."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from posenc.backends import get_backend
from posenc.backends.torch import flex as torch_flex
from posenc.encodings.t5 import t5_bias, t5_bucket


def _mutant(name: str, **overrides: Any) -> Any:
    return dataclasses.replace(get_backend("torch"), name=name, overrides=overrides)


def _t5_query_minus_key(q_len: int, k_len: int, table: Any, *, bidirectional: bool = True,
                        num_buckets: int = 32, max_distance: int = 128,
                        query_offset: int = 0) -> Any:
    """The bucket of (query_offset + i) − j: HF's memory − context written the other way."""
    distances = torch.arange(-(query_offset + q_len - 1), k_len - query_offset,
                             device=table.device)  # j − (query_offset + i), ascending
    buckets = t5_bucket(-distances, bidirectional=bidirectional, num_buckets=num_buckets,
                        max_distance=max_distance)
    rows = table[buckets].T  # [heads, q_len + k_len − 1]

    def score_mod(score: Any, b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        return score + rows[h, kv_idx - q_idx + (q_len - 1)]

    return score_mod


T5_SIGN_FLIP = _mutant("flex_t5_query_minus_key", t5_score_mod=_t5_query_minus_key)


def _alibi_start_aligned(num_heads: int, q_len: int, k_len: int, **kw: Any) -> Any:
    """Row q_idx at position q_idx (the square bias's first rows) instead of k_len − q_len +
    q_idx."""
    return torch_flex.alibi_score_mod(num_heads, k_len, k_len, **kw)


ALIBI_START_ALIGNED = _mutant("flex_alibi_start_aligned", alibi_score_mod=_alibi_start_aligned)


def _t5_materialised(q_len: int, k_len: int, table: Any, **kw: Any) -> Any:
    """Right values from an L×L tensor: the memory the score_mod is there to avoid."""
    bias = t5_bias(q_len, k_len, table, **kw)

    def score_mod(score: Any, b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        return score + bias[h, q_idx, kv_idx]

    return score_mod


T5_MATERIALISED = _mutant("flex_t5_materialised", t5_score_mod=_t5_materialised)
