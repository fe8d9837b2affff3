"""Learned absolute position table (BERT, GPT-2): a row lookup with an explicit range policy."""

from __future__ import annotations

from typing import Any

from .. import array_api, params
from ..layers import Layer, Weight, normal

__all__ = ["learned"]

POLICIES = ("error", "clip")


def learned(positions: Any, table: Any, *, out_of_range: str = "error") -> Any:
    """Rows ``table[positions]``, shape ``[*positions.shape, dim]``, for a ``[max_len, dim]`` table.

    ``out_of_range`` decides what a position outside ``[0, max_len)`` does:
    ``"error"`` raises :class:`~posenc.errors.PositionOutOfRangeError` in eager mode; inside
    jax.jit / torch.compile / tf.function the values cannot be inspected, so the rows of such
    positions are filled with NaN instead (loud, never a silently wrong row).
    ``"clip"`` clamps positions into range (what JAX's gather does by default).
    Negative positions never wrap around.
    """
    xp = array_api.namespace(positions=positions, table=table)
    params.choice("out_of_range", out_of_range, POLICIES)
    positions, max_len, dim = array_api.table_and_positions(xp, positions, table,
                                                      table_shape="[max_len, dim]")
    positions = array_api.at_least_int32(xp, positions)  # exact: the range check sees the same values
    traced = array_api.is_traced(positions)
    if out_of_range == "error" and not traced:
        array_api.check_position_range(xp, positions, compute=None, low=0, high=max_len)

    shape = tuple(positions.shape)
    flat = xp.reshape(positions, (-1,))
    # where() rather than clip(): array-api-compat's torch clip calls math.isnan on the bound,
    # which torch.compile cannot trace once max_len is a symbolic size.
    index = xp.where(flat < 0, xp.zeros_like(flat), flat)
    index = xp.where(index >= max_len, xp.full_like(index, max_len - 1), index)
    rows = xp.take(table, index, axis=0)
    if out_of_range == "error" and traced:
        outside = (flat < 0) | (flat >= max_len)
        nan = xp.full((1, 1), float("nan"), dtype=table.dtype, device=array_api.device_of(table))
        rows = xp.where(outside[:, None], nan, rows)
    return xp.reshape(rows, (*shape, dim))


LAYERS = (Layer(
    "LearnedPositionEmbedding", "learned",
    weights=(Weight("table", lambda c: (c["num_positions"], c["dim"]), normal(0.02)),),
    sizes=("num_positions", "dim"), config=("out_of_range",),
    doc="A trained table of absolute positions (BERT, GPT-2): layer(positions) -> rows"),)
