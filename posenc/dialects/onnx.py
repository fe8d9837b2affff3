"""transformers rope -> inputs and attributes of ONNX ``RotaryEmbedding`` (opset 23).

The operator (https://onnx.ai/onnx/operators/onnx__RotaryEmbedding.html) takes ``cos_cache``
and ``sin_cache`` of shape ``[max_position_id + 1, rotary_embedding_dim / 2]`` gathered by
``position_ids``, ``interleaved`` (1: pairs (2i, 2i+1); 0: (i, i + r/2), transformers' layout)
and ``rotary_embedding_dim`` (0: the whole head). A schedule that depends on the sequence
length (dynamic, LongRoPE) is baked at the ``seq_len`` given; the attention factor multiplies
both caches. Not invertible: the caches do not name a schedule.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import params
from ..errors import ParameterError
from .transformers import RopeLayer, require_layer


def to_onnx(layer: RopeLayer, max_positions: int, *, seq_len: int | None = None
            ) -> dict[str, Any]:
    """``{"cos_cache", "sin_cache", "interleaved", "rotary_embedding_dim"}`` (float64 caches
    computed from float64 frequencies; cast them to the model's dtype)."""
    require_layer(layer)
    max_positions = params.count("max_positions", max_positions)
    if seq_len is not None:
        seq_len = params.count("seq_len", seq_len)
    if layer.mrope_section:
        raise ParameterError(f"mrope_section={layer.mrope_section!r}: ONNX RotaryEmbedding "
                             "gathers one position id per token and cannot hold M-RoPE sections")
    if layer.rope_type == "dynamic" and seq_len is None:
        raise ParameterError("rope_type='dynamic' depends on the sequence length: give seq_len "
                             "to bake the caches for one length")
    resolved = layer.resolve(seq_len)
    # two caches of max_positions x rotary_dim/2, checked before a row is computed
    params.bounded("max_positions", max_positions, 2 * max_positions * (resolved.rotary_dim // 2),
                   what="the cos/sin caches")
    inv_freq = np.asarray(resolved.inv_freq, dtype=np.float64)
    angles = np.arange(max_positions, dtype=np.float64)[:, None] * inv_freq
    scale = resolved.attention_factor
    r = resolved.rotary_dim
    return {"cos_cache": np.cos(angles) * scale, "sin_cache": np.sin(angles) * scale,
            "interleaved": int(layer.interleaved),
            "rotary_embedding_dim": 0 if r == layer.head_dim else r}
