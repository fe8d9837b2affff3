"""Su's hierarchical decomposition: a trained table of n rows extended to n² positions."""

from __future__ import annotations

import numbers
from typing import Any

from .. import array_api, params
from ..errors import ParameterError
from ..layers import Layer, Weight, normal

__all__ = ["hierarchical"]

POLICIES = ("error", "clip")


def _alpha(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ParameterError(f"alpha must be a number, got {value!r} ({type(value).__name__})")
    # comparisons rather than math.isfinite (NaN fails both): see params.positive
    if not 0 < value < 1:
        raise ParameterError(f"alpha={value!r} must be a finite number strictly between 0 and 1")
    return float(value)


def hierarchical(positions: Any, table: Any, *, alpha: float = 0.4, out_of_range: str = "error") -> Any:
    """Rows ``q[positions]`` of the table extended from ``n`` to ``n²`` positions.

    ``table`` is the trained ``[n, dim]`` table ``p``; the result has shape
    ``[*positions.shape, dim]`` and the table's dtype. Position ``k = i·n + j`` (0-based,
    ``i = k // n``, ``j = k % n``) gets ``alpha·u_i + (1 − alpha)·u_j`` with
    ``u_i = (p_i − alpha·p_0)/(1 − alpha)``, computed as the equal
    ``p_j + alpha/(1 − alpha)·(p_i − p_0)``, so that the first ``n`` positions return the
    trained rows bit for bit. Arithmetic runs in float32 (float64 for float64 tables).

    ``out_of_range`` decides what a position outside ``[0, n²)`` does: ``"error"`` raises
    :class:`~posenc.errors.PositionOutOfRangeError` in eager mode and gives NaN rows inside
    jax.jit / torch.compile / tf.function; ``"clip"`` clamps into ``[0, n² − 1]``.
    """
    xp = array_api.namespace(positions=positions, table=table)
    params.choice("out_of_range", out_of_range, POLICIES)
    alpha = _alpha(alpha)
    positions, n, dim = array_api.table_and_positions(xp, positions, table, table_shape="[n, dim]")
    positions = array_api.at_least_int32(xp, positions)  # exact: the range check sees the same values
    count = n * n
    traced = array_api.is_traced(positions)
    if out_of_range == "error" and not traced:
        array_api.check_position_range(xp, positions, compute=None, low=0, high=count)

    # The largest valid position that the positions' dtype can hold (n² may exceed int32).
    last = min(count - 1, int(xp.iinfo(positions.dtype).max))
    shape = tuple(positions.shape)
    flat = xp.reshape(positions, (-1,))
    # where() rather than clip(), as in learned.py (torch.compile and symbolic bounds)
    index = xp.where(flat < 0, xp.zeros_like(flat), flat)
    index = xp.where(index > last, xp.full_like(index, last), index)
    coarse, fine = index // n, index % n

    compute = array_api.compute_dtype(xp, table.dtype)
    p = xp.astype(table, compute, copy=False)
    # alpha/(1 - alpha)·(p_i − p_0): row 0 is exactly zero, so q_k = p_k + 0 = p_k for k < n.
    shift = (alpha / (1.0 - alpha)) * (p - p[0:1, :])
    rows = xp.take(p, fine, axis=0) + xp.take(shift, coarse, axis=0)
    rows = xp.astype(rows, table.dtype, copy=False)
    if out_of_range == "error" and traced:
        outside = (flat < 0) | (flat > last)
        nan = xp.full((1, 1), float("nan"), dtype=table.dtype, device=array_api.device_of(table))
        rows = xp.where(outside[:, None], nan, rows)
    return xp.reshape(rows, (*shape, dim))


LAYERS = (Layer(
    "HierarchicalPositionEmbedding", "hierarchical",
    weights=(Weight("table", lambda c: (c["num_positions"], c["dim"]), normal(0.02)),),
    sizes=("num_positions", "dim"), config=("alpha", "out_of_range"),
    doc="A trained table of n rows extended to n² positions: layer(positions) -> rows"),)
