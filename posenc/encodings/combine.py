"""Combining an absolute position table with the input: add, multiply, scale or concat."""

from __future__ import annotations

from typing import Any

from .. import array_api, params, validation
from ..errors import ParameterError

__all__ = ["combine"]

MODES = ("add", "multiply", "scale", "concat")

_INPUTS = validation.Inputs("combine", messages={
    "axis": "{name} has shape {shape} but {first} has shape {first_shape}: {axis} differs "
            "({size} != {first_size})",
    "dtypes": "x has dtype {dtype[x]} but p has dtype {dtype[p]}: cast p to x's dtype first"})


def _check_shapes(x: Any, p: Any, mode: str) -> None:
    xs, ps = tuple(x.shape), tuple(p.shape)
    if len(ps) > len(xs):
        raise ParameterError(
            f"p has shape {ps} but x has shape {xs}: p has more axes than x, and combining must "
            "not change x's shape")
    if mode != "concat" and ps[-1] != xs[-1]:
        raise ParameterError(
            f"p has shape {ps} but x has shape {xs}: mode={mode!r} needs the same feature "
            f"width ({ps[-1]} != {xs[-1]}); only mode='concat' takes a different one")
    lead_p, lead_x = ps[:-2], xs[len(xs) - len(ps):-2]
    if any(a != 1 and a != b for a, b in zip(lead_p, lead_x, strict=True)):
        raise ParameterError(
            f"p has shape {ps} but x has shape {xs}: p's leading axes {lead_p} do not broadcast "
            f"to x's {lead_x} (axes line up from the right; each must be 1 or equal)")


def combine(x: Any, p: Any, *, mode: str = "add") -> Any:
    """Combine ``x`` (``[..., seq, dim]``) with position rows ``p`` (``[..., seq, dim_p]``).

    ``mode``: ``"add"`` gives ``x + p`` (BERT, GPT-2), ``"multiply"`` ``x * p``, ``"scale"``
    ``x * (1 + p)`` (x unchanged where p = 0; bert4keras' ``merge_mode='mul'``), ``"concat"``
    ``[x, p]`` along the last axis, shape ``[..., seq, dim + dim_p]``. Other modes keep x's
    shape and need ``dim_p == dim``.

    ``p``'s leading axes broadcast to x's the NumPy way (lined up from the right), and never
    change x's shape: ``[seq, d]`` and ``[1, seq, d]`` fit ``x [batch, seq, d]``; a per-batch
    table against ``x [batch, heads, seq, d]`` is passed as ``[batch, 1, seq, d]``.
    ``x`` and ``p`` must share one floating dtype, which the result has. add and multiply run
    in that dtype (a single rounding); scale computes ``1 + p`` and the product in float32
    (float64 for float64), since ``1 + p`` rounded to bfloat16 would drop the low bits of a
    small p, and rounds once at the end.
    """
    xp = array_api.namespace(x=x, p=p)
    params.choice("mode", mode, MODES)
    _INPUTS.check(xp, x=x, p=p)
    _check_shapes(x, p, mode)

    if mode == "add":
        return x + p
    if mode == "multiply":
        return x * p
    if mode == "scale":
        compute = array_api.compute_dtype(xp, x.dtype)
        wide = xp.astype(x, compute, copy=False) * (1 + xp.astype(p, compute, copy=False))
        return xp.astype(wide, x.dtype, copy=False)
    rows = xp.broadcast_to(p, (*tuple(x.shape[:-1]), int(p.shape[-1])))
    return xp.concat([x, rows], axis=-1)
