"""TUPE: untied positional attention scores (Ke, He & Liu, ICLR 2021)."""

from __future__ import annotations

import math
from typing import Any

from .. import array_api, params, shapes, validation
from ..errors import ParameterError
from ..layers import ZEROS, Layer, Weight

__all__ = ["tupe"]


def _cls_shape(fields: dict[str, Any]) -> str:
    if not fields["shape"]:
        return validation.DEFAULT_MESSAGES["rank"].format(**fields)
    return (f"cls has shape {fields['shape']}: its last dim must be 2, (theta_1 [CLS]-to-others, "
            "theta_2 others-to-[CLS])")


_ROWS = "{name} has {size} positions (shape {shape}) but {axis}={first_size}: one row per token"
_INPUTS = validation.Inputs("tupe", messages={
    "axis:d": "{name} has width {size} (shape {shape}) but {first} has width d={first_size}: "
              "the last dims must agree",
    "axis:q_len": _ROWS, "axis:k_len": _ROWS, "rank:cls": _cls_shape,
    "dtypes": "the array inputs must share one dtype, got {listed}"})


def _check(q: Any, k: Any, pos_q: Any, pos_k: Any, bias: Any, cls: Any) -> Any:
    """Validate the arrays; returns their namespace."""
    xp = array_api.namespace(q=q, k=k, pos_q=pos_q, pos_k=pos_k, bias=bias, cls=cls)
    _INPUTS.check(xp, q=q, k=k, pos_q=pos_q, pos_k=pos_k, bias=bias, cls=cls)
    if bias is not None and bias.ndim < 2:  # its spec shape is prose ("broadcasts to ...")
        raise ParameterError(f"bias must have shape [..., q_len, k_len], got shape "
                             f"{tuple(bias.shape)}")
    q_len, k_len = int(q.shape[-2]), int(k.shape[-2])
    batch = {"q": tuple(q.shape[:-2]), "k": tuple(k.shape[:-2]),
             "pos_q": tuple(pos_q.shape[:-2]), "pos_k": tuple(pos_k.shape[:-2])}
    if bias is not None:
        rows, cols = int(bias.shape[-2]), int(bias.shape[-1])
        if not ((rows == 1 or rows == q_len) and (cols == 1 or cols == k_len)):
            raise ParameterError(f"bias has shape {tuple(bias.shape)}, which does not broadcast "
                                 f"to [..., q_len, k_len] = [..., {q_len}, {k_len}]")
        batch["bias"] = tuple(bias.shape[:-2])
    if cls is not None:
        if q_len != k_len:
            raise ParameterError(f"cls needs self-attention with query 0 and key 0 the [CLS] "
                                 f"token, but q_len={q_len} != k_len={k_len}")
        batch["cls"] = tuple(cls.shape[:-1])
    shapes.broadcast_batch(batch)
    return xp


def tupe(
    q: Any, k: Any, pos_q: Any, pos_k: Any, bias: Any = None, cls: Any = None, *,
    scale: float | None = None,
) -> Any:
    """TUPE attention scores ``[..., q_len, k_len]``: word and position correlations untied.

    ``s_ij = (q_iᵀ k_j + pos_q_iᵀ pos_k_j) · scale + bias_ij`` with ``q`` ``[..., q_len, d]``,
    ``k`` ``[..., k_len, d]`` (the word projections x W_Q, x W_K) and ``pos_q`` ``[..., q_len, d]``,
    ``pos_k`` ``[..., k_len, d]`` (the absolute position projections p U_Q, p U_K; e.g.
    ``[heads, len, d]`` shared by the batch). ``scale`` defaults to ``1/sqrt(2d)``. ``bias``
    (TUPE-R's relative bias) broadcasts to the scores and is added unscaled. ``cls`` ``[..., 2]``
    (e.g. per head ``[heads, 2]``) unties [CLS] (query 0 = key 0; needs ``q_len == k_len``):
    the positional term ``pos_q_iᵀ pos_k_j · scale`` of row 0 becomes ``cls[..., 0]`` (θ1,
    [CLS] to others, including its own entry) and that of column 0, rows ``i ≥ 1``, becomes
    ``cls[..., 1]`` (θ2, others to [CLS]). Computed in float32 (float64 for float64 inputs),
    returned in the dtype of ``q``.
    """
    xp = _check(q, k, pos_q, pos_k, bias, cls)
    if scale is not None:
        scale = params.float32_range("scale", params.positive("scale", scale))
    q_len, k_len, d = int(q.shape[-2]), int(k.shape[-2]), int(q.shape[-1])
    compute = array_api.compute_dtype(xp, q.dtype)
    qc, kc, pq, pk = (xp.astype(a, compute, copy=False) for a in (q, k, pos_q, pos_k))
    s = 1.0 / math.sqrt(2 * d) if scale is None else scale

    word = xp.matmul(qc, xp.matrix_transpose(kc)) * s
    position = xp.matmul(pq, xp.matrix_transpose(pk)) * s
    if cls is not None:
        dev = array_api.device_of(q)
        theta = xp.astype(cls, compute, copy=False)
        rows = xp.reshape(xp.arange(q_len, device=dev), (q_len, 1))
        cols = xp.reshape(xp.arange(k_len, device=dev), (1, k_len))
        position = xp.where(cols == 0, theta[..., 1:2, None], position)
        position = xp.where(rows == 0, theta[..., 0:1, None], position)  # row 0 wins at (0, 0)
    scores = word + position
    if bias is not None:
        scores = scores + xp.astype(bias, compute, copy=False)
    return xp.astype(scores, q.dtype, copy=False)


LAYERS = (Layer(
    "TUPEScores", "tupe",
    weights=(Weight("cls", lambda c: (2,), ZEROS, optional="untie_cls"),),
    sizes=("untie_cls",), size_defaults={"untie_cls": True}, config=("scale",),
    doc="TUPE's untied scores with trained [CLS] biases: layer(q, k, pos_q, pos_k, bias=None)"),)
