"""ALiBi, T5 and KERPLE biases for PyTorch FlexAttention, without a ``[q_len, k_len]`` tensor.

``torch.nn.attention.flex_attention.flex_attention(q, k, v, score_mod=...)`` calls
``score_mod(score, b, h, q_idx, kv_idx)`` for every score: query row ``q_idx`` (0 ..
q_len − 1), key ``kv_idx`` (0 .. k_len − 1), query head ``h``. The factories here return such
functions. Each holds O(heads · length) numbers at most: ALiBi's slopes, or the bias of each of
the ``q_len + k_len − 1`` distinct relative distances (T5) or ``k_len`` distances (KERPLE),
computed once by posenc's own ``t5_bias`` / ``kerple`` and indexed per score. The values equal
the materialised ``alibi_bias`` / ``t5_bias`` / ``kerple`` entry for entry (the conformance
properties ``alibi_flex_score_mod``, ``t5_flex_score_mod`` and ``kerple_flex_score_mod`` check
it), and gradients reach T5's table and KERPLE's ``r1``, ``r2`` through ``flex_attention``.

A score_mod is built for one ``(q_len, k_len)``: pass ``flex_attention`` queries and keys of
exactly those lengths, and ``num_heads`` query heads (indices are not bounds-checked inside a
compiled kernel). Position offsets are captured as 0-d tensors, not Python ints: under
``torch.compile(flex_attention)`` a captured int is a constant that recompiles the kernel at
every decoding step, a captured tensor an input that does not. The bias is added in float32
(float64 for float64 queries), as :func:`posenc.attention` adds a bias.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from posenc import params
from posenc.encodings import alibi
from posenc.encodings.kerple import kerple
from posenc.encodings.t5 import t5_bias
from posenc.errors import ParameterError

__all__ = ["alibi_score_mod", "causal_mask_mod", "kerple_score_mod", "t5_score_mod"]

ScoreMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
                    torch.Tensor]
MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def _offset(value: int, device: Any) -> torch.Tensor:
    """A position offset captured as a tensor (an input to a compiled kernel, not a constant)."""
    return torch.tensor(value, dtype=torch.int64, device=device)


def _compute(score: torch.Tensor) -> torch.dtype:
    """The dtype a bias is added in: float64 for float64 queries, float32 otherwise. (Inside a
    compiled kernel ``score`` is traced with the queries' dtype and holds float32 values.)"""
    return torch.float64 if score.dtype == torch.float64 else torch.float32


def _tensor(name: str, value: Any) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise ParameterError(f"{name} must be a torch.Tensor (a score_mod indexes it inside "
                             f"flex_attention), got {type(value).__name__}")
    return value


def alibi_score_mod(num_heads: int, q_len: int, k_len: int, *, form: str = "causal",
                    max_bias: float = 8.0, device: Any = None) -> ScoreMod:
    """A score_mod adding ``alibi_bias(num_heads, q_len, k_len, form=form,
    max_bias=max_bias)[h, q_idx, kv_idx]`` (key_only: ``[h, 0, kv_idx]``) to each score.

    Queries are aligned to the end of the keys as in ``alibi_bias``: row ``q_idx`` sits at
    position ``k_len − q_len + q_idx``. The bias is computed from ``(h, q_idx, kv_idx)`` and the
    slopes of ``alibi_slopes`` (held in float32 and float64 on ``device``; O(heads) numbers).
    ``causal`` and ``key_only`` need a causal mask, end-aligned: ``block_mask =
    create_block_mask(causal_mask_mod(k_len − q_len, device=device), None, None, q_len, k_len,
    device=device)``.
    """
    q_len, k_len = params.query_lengths(q_len, k_len)
    params.choice("form", form, alibi.FORMS)
    slopes32 = alibi.alibi_slopes(num_heads, max_bias=max_bias, dtype=torch.float32,
                                  device=device)
    slopes64 = alibi.alibi_slopes(num_heads, max_bias=max_bias, dtype=torch.float64,
                                  device=device)
    first_query = _offset(k_len - q_len, slopes32.device)

    def score_mod(score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor,
                  kv_idx: torch.Tensor) -> torch.Tensor:
        slopes = slopes64 if _compute(score) == torch.float64 else slopes32
        if form == "key_only":
            distance = kv_idx
        else:
            distance = kv_idx - (q_idx + first_query)  # j − i, exact in integers
            if form == "symmetric":
                distance = -torch.abs(distance)
        return score + slopes[h] * distance.to(slopes.dtype)

    return score_mod


def t5_score_mod(q_len: int, k_len: int, table: Any, *, bidirectional: bool = True,
                 num_buckets: int = 32, max_distance: int = 128,
                 query_offset: int = 0) -> ScoreMod:
    """A score_mod adding ``t5_bias(q_len, k_len, table, ...)[h, q_idx, kv_idx]`` to each score.

    Query ``q_idx`` sits at ``query_offset + q_idx``, key ``kv_idx`` at ``kv_idx``; the bias is
    the table row of the bucket of ``kv_idx − (query_offset + q_idx)``. Those distances take
    ``q_len + k_len − 1`` values: their bias, ``[heads, q_len + k_len − 1]``, is computed once
    here by ``t5_bias`` (exact buckets, entries copied from ``table``, which receives gradients
    through it) and indexed by ``kv_idx − q_idx``. T5 adds its bias to unscaled scores: call
    ``flex_attention(..., scale=1.0)`` for T5 checkpoints. A decoder needs a causal mask:
    ``causal_mask_mod(query_offset, device=table.device)``.
    """
    q_len = params.integer("q_len", q_len, minimum=0)
    k_len = params.integer("k_len", k_len, minimum=0)
    query_offset = params.integer("query_offset", query_offset, minimum=0)
    _tensor("table", table)
    count = q_len + k_len - 1 if q_len and k_len else 0
    # one query at query_offset + q_len − 1 over `count` keys sees the distances
    # −(query_offset + q_len − 1) .. k_len − 1 − query_offset in ascending order: every
    # j − (query_offset + i), at index j − i + q_len − 1 (contiguous: neighbouring keys read
    # neighbouring entries)
    rows = t5_bias(1, count, table, bidirectional=bidirectional, num_buckets=num_buckets,
                   max_distance=max_distance,
                   query_offset=max(query_offset + q_len - 1, 0))[:, 0, :].contiguous()
    last_query = _offset(q_len - 1, table.device)

    def score_mod(score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor,
                  kv_idx: torch.Tensor) -> torch.Tensor:
        return score + rows[h, kv_idx - q_idx + last_query].to(_compute(score))

    return score_mod


def kerple_score_mod(q_len: int, k_len: int, r1: Any, r2: Any, *,
                     form: str = "log") -> ScoreMod:
    """A score_mod adding ``kerple(q_len, k_len, r1, r2, form=form)[h, q_idx, kv_idx]`` to each
    score: the kernel of each distance ``0 .. k_len − 1`` is computed once here by ``kerple``
    (``[heads, k_len]``; ``r1`` and ``r2`` receive gradients through it) and indexed by
    ``|i − kv_idx|``, with queries end-aligned (``i = k_len − q_len + q_idx``)."""
    q_len, k_len = params.query_lengths(q_len, k_len)
    _tensor("r1", r1)
    _tensor("r2", r2)
    # one query at position k_len − 1 sees the distances k_len − 1 .. 0: reversed, index = distance
    last_row = kerple(min(k_len, 1), k_len, r1, r2, form=form)
    kernel = torch.flip(last_row.reshape(last_row.shape[0], k_len), dims=(-1,))
    first_query = _offset(k_len - q_len, r1.device)

    def score_mod(score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor,
                  kv_idx: torch.Tensor) -> torch.Tensor:
        distance = torch.abs(q_idx + first_query - kv_idx)
        return score + kernel[h, distance].to(_compute(score))

    return score_mod


def causal_mask_mod(query_offset: int = 0, *, device: Any = None) -> MaskMod:
    """A mask_mod for ``create_block_mask``: key ``kv_idx`` is visible to query row ``q_idx``
    when ``kv_idx <= query_offset + q_idx``. ``query_offset`` is the position of the first
    query: ``k_len − q_len`` for ALiBi and KERPLE (queries end-aligned), T5's
    ``query_offset``. Place it on the device of the attention inputs."""
    query_offset = params.integer("query_offset", query_offset, minimum=0)
    first_query = _offset(query_offset, device)

    def mask_mod(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor,
                 kv_idx: torch.Tensor) -> torch.Tensor:
        return kv_idx <= q_idx + first_query

    return mask_mod
