"""Transforms of dual chunk attention (``dual_chunk_attention``): the local window off by one,
the query positions clamped, the inter-chunk position read from the intra table."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..reference.dual_chunk_attention import chunk_positions, default_positions, embed
from .base import Arrays, Reference, Transform, register


def _dca_with(change: Any) -> Any:
    """The reference's rotations at DCA positions altered by ``change(positions, params)``."""
    def apply(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
        p = default_positions(inputs["q"], inputs.get("positions"))
        chunk = change(p, params)
        return embed(inputs["q"], inputs["k"], chunk, base=params["base"],
                     layout=params["layout"], rotary_dim=params["rotary_dim"])
    return apply


def _dca_local_size(by: int) -> Any:
    def change(p: np.ndarray, params: dict[str, Any]) -> Any:
        return chunk_positions(p, params["chunk_size"], params["local_size"] + by,
                               params["critical"])
    return change


def _dca_clamp_exclusive(p: np.ndarray, params: dict[str, Any]) -> Any:
    intra, succ, inter, key = chunk_positions(p, params["chunk_size"], params["local_size"],
                                              params["critical"])
    top = params["chunk_size"] - 1
    return intra, np.minimum(succ, top), np.minimum(inter, top), key


def _dca_inter_from_intra(p: np.ndarray, params: dict[str, Any]) -> Any:
    intra, succ, inter, key = chunk_positions(p, params["chunk_size"], params["local_size"],
                                              params["critical"])
    return intra, succ, np.full_like(inter, params["chunk_size"] - params["local_size"] - 1), key


_INPUTS = ("q", "k")

register(
    dca_local_size_plus_one=Transform(
        "chunk length chunk_size - local_size - 1", _dca_with(_dca_local_size(1)),
        inputs=_INPUTS, params=("chunk_size", "local_size"),
        modules=("dual_chunk_attention",)),
    dca_local_size_minus_one=Transform(
        "chunk length chunk_size - local_size + 1", _dca_with(_dca_local_size(-1)),
        inputs=_INPUTS, params=("chunk_size", "local_size"),
        modules=("dual_chunk_attention",)),
    dca_clamp_exclusive=Transform(
        "query positions clamped at chunk_size - 1", _dca_with(_dca_clamp_exclusive),
        inputs=_INPUTS, params=("chunk_size",), modules=("dual_chunk_attention",)),
    dca_inter_from_intra_table=Transform(
        "q_inter at chunk_size - local_size - 1", _dca_with(_dca_inter_from_intra),
        inputs=_INPUTS, params=("chunk_size", "local_size"),
        modules=("dual_chunk_attention",)),
)
