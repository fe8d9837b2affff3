"""The rule a (q, k) pair meets wherever posenc rotates both in one call (RotaryEmbedding, the
fused kernel): k shares q's batch, sequence and head_dim (it may have fewer heads, GQA) and
its dtype."""

from __future__ import annotations

import torch

from posenc.errors import ParameterError


def check_pair(q: torch.Tensor, k: torch.Tensor) -> None:
    """ParameterError naming both shapes (or dtypes) where k cannot be rotated beside q."""
    if k.ndim != q.ndim or k.shape[-1] != q.shape[-1] or k.shape[-2] != q.shape[-2] \
            or (q.ndim >= 3 and k.shape[0] != q.shape[0]):
        raise ParameterError(
            f"k has shape {tuple(k.shape)} but q has shape {tuple(q.shape)}: k must share the "
            "batch, sequence and head_dim of q (it may have fewer heads)")
    if q.dtype != k.dtype:
        raise ParameterError(f"q is {q.dtype} but k is {k.dtype}")
