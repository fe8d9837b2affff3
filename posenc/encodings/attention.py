"""Scaled dot-product attention: the op relative biases enter and absolute encodings feed."""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

from .. import array_api, params, shapes, validation

__all__ = ["attention"]

# Texts shared with Shaw's attention, which checks q, k and v the same way
SCORE_MESSAGES = {
    "rank": "{name} must have at least {min_rank} dims [..., len, dim], got shape {shape}",
    "axis:d": "{first} and {name} must have the same last dim, got shapes {first_shape} and "
              "{shape}",
    "axis:k_len": "{first} and {name} must have the same length (axis -2), got shapes "
                  "{first_shape} and {shape}",
    "kind:mask": "mask must be boolean (True = may attend), got dtype {dtype}",
}
_INPUTS = validation.Inputs("attention", same_dtype=("q", "k", "v"), messages={
    **SCORE_MESSAGES, "dtypes": "{names} must share one dtype, got {dtypes}"})


def attention(
    q: Any, k: Any, v: Any, *, bias: Any = None, mask: Any = None, scale: float | None = None,
) -> Any:
    """``softmax(q kᵀ · scale + bias, where mask) v``; shape ``[..., q_len, d_v]``, dtype of q.

    ``q`` ``[..., q_len, d]``, ``k`` ``[..., k_len, d]``, ``v`` ``[..., k_len, d_v]`` (leading
    dims broadcast). ``bias`` (float) and ``mask`` (bool, True = may attend) broadcast against
    ``[..., q_len, k_len]``. ``scale`` defaults to ``1/sqrt(d)``; with ``d = 0`` there is no
    default and ``scale`` must be given (the scores are then all 0, a :class:`ParameterError`
    otherwise). A query whose keys are all masked gives a zero row, and so does every query
    when ``k_len = 0`` (zeros ``[..., q_len, d_v]``). Scores and softmax run in float32 (float64
    for float64 inputs).
    """
    xp = array_api.namespace(q=q, k=k, v=v, bias=bias, mask=mask)
    _INPUTS.check(xp, q=q, k=k, v=v, bias=bias, mask=mask)
    params.scale(scale)
    batch = shapes.broadcast_batch({"q": tuple(q.shape[:-2]), "k": tuple(k.shape[:-2]),
                                     "v": tuple(v.shape[:-2])})
    scores_shape = (*batch, int(q.shape[-2]), int(k.shape[-2]))
    for name, a in (("bias", bias), ("mask", mask)):
        if a is not None:
            shapes.check_broadcasts_to(name, tuple(a.shape), scores_shape, "[..., q_len, k_len]")

    s = params.default_scale(scale, tuple(q.shape))
    compute = array_api.compute_dtype(xp, q.dtype)
    qc, kc, vc = (xp.astype(a, compute, copy=False) for a in (q, k, v))
    scores = xp.matmul(qc, xp.matrix_transpose(kc)) * s
    if bias is not None:
        scores = scores + xp.astype(bias, compute, copy=False)
    weights = softmax_where(xp, scores, mask)
    return xp.astype(xp.matmul(weights, vc), q.dtype, copy=False)


def softmax_where(xp: ModuleType, scores: Any, mask: Any) -> Any:
    """Softmax over the last axis of ``scores`` where ``mask`` (bool, None: everywhere); a row
    with every entry masked is all zeros, not NaN, and so is a row of no entries (k_len = 0:
    the empty weights, whose product with the values is a zero row)."""
    if scores.shape[-1] == 0:
        return scores  # nothing to normalise (and max over an empty axis is undefined)
    if mask is not None:
        minus_inf = array_api.asarray(xp, -math.inf, dtype=scores.dtype,
                                device=array_api.device_of(scores))
        scores = xp.where(mask, scores, minus_inf)
    top = xp.max(scores, axis=-1, keepdims=True)
    # a fully masked row has top = -inf; shifting by 0 keeps its exps at exactly 0
    top = xp.where(top == -math.inf, xp.zeros_like(top), top)
    weights = xp.exp(scores - top)
    total = xp.sum(weights, axis=-1, keepdims=True)
    return weights / xp.where(total == 0, xp.ones_like(total), total)
