"""Recurrent absolute table ``p_{k+1} = A p_k`` (seed 000 §Recursive with a linear step)."""

from __future__ import annotations

from typing import Any

from .. import array_api, params, validation
from ..errors import ParameterError
from ..layers import IDENTITY, Layer, Weight, normal

__all__ = ["recurrent"]

_P0_SHAPE = "p0 must have shape [d] with d >= 1, got shape {shape}"
_INPUTS = validation.Inputs("recurrent", messages={
    "rank:p0": _P0_SHAPE,
    "shape:transition": "transition has shape {shape} but p0 has shape {shape_of[p0]}: "
                        "transition must be [d, d] = {expected}",
    "dtypes": "{names} must have the same dtype, got {dtypes_and}"})


def _check_inputs(xp: Any, p0: Any, transition: Any) -> int:
    d = int(_INPUTS.check(xp, p0=p0, transition=transition)["d"])
    if d == 0:
        raise ParameterError(_P0_SHAPE.format(shape=tuple(p0.shape)))
    return d


def recurrent(p0: Any, transition: Any, *, length: int) -> Any:
    """The ``[length, d]`` table whose row ``k`` is ``A^k p0`` (row 0 is ``p0``), dtype of ``p0``.

    ``p0`` is ``[d]`` and ``transition`` (``A``) is ``[d, d]``, both of one floating dtype.
    ``A`` acts on column vectors: ``p_{k+1} = A @ p_k``; in the row-vector form of the table,
    row ``k + 1`` is ``row_k @ A.T``. (A ``torch.nn.Linear(d, d, bias=False)`` computing the
    step stores exactly this ``A`` as its ``weight``.)

    The table is built without a loop over positions, by doubling: with rows ``0..m-1`` known,
    rows ``m..2m-1`` are ``T @ (A^m).T`` and ``A^m`` is then squared, ``ceil(log2(length))``
    static steps (the last one computes only the rows still missing). Row ``k`` is a product
    of the powers ``A^(2^j)`` over the bits of ``k``, so its rounding error grows about
    linearly in ``k``, as in the step-by-step recursion. Computed in float32 for
    bfloat16/float16/float32 inputs (float64 for float64) and cast back.
    """
    xp = array_api.namespace(p0=p0, transition=transition)
    length = params.size("length", length, minimum=1)
    d = _check_inputs(xp, p0, transition)
    params.bounded("length", length, length * d, what=f"the [{length}, {d}] table")
    dtype = p0.dtype
    compute = array_api.compute_dtype(xp, dtype)
    table = xp.reshape(xp.astype(p0, compute, copy=False), (1, d))
    power_t = xp.matrix_transpose(xp.astype(transition, compute, copy=False))  # (A^1).T
    rows = 1
    # Static loop over the ceil(log2(length)) doubling steps, not over positions.
    for _ in range((length - 1).bit_length()):
        new = min(rows, length - rows)
        table = xp.concat([table, xp.matmul(table[:new, :], power_t)], axis=0)
        rows += new
        if rows < length:
            power_t = xp.matmul(power_t, power_t)  # (A^2m).T = (A^m).T (A^m).T
    return xp.astype(table, dtype, copy=False)


LAYERS = (Layer(
    "RecurrentPositionEmbedding", "recurrent",
    weights=(Weight("p0", lambda c: (c["dim"],), normal(0.02)),
             Weight("transition", lambda c: (c["dim"], c["dim"]), IDENTITY)),
    sizes=("dim",),
    doc="p_{k+1} = A p_k with trained p0 and A: layer(length=L) -> [L, dim]"),)
