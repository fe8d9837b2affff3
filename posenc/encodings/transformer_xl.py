"""Transformer-XL / XLNet relative attention scores (Dai et al. 2019; Yang et al. 2019)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import array_api, params, shapes, validation
from ..errors import ParameterError
from ..layers import ZEROS, Layer, Weight

__all__ = ["transformer_xl"]

METHODS = ("rel_shift", "gather")

_INPUTS = validation.Inputs("transformer_xl", messages={
    "axis:d": "{name} has width {size} (shape {shape}) but {first} has width d={first_size}: "
              "the last dims must agree"})


def _check(q: Any, k: Any, r_proj: Any, content_bias: Any, position_bias: Any) -> Any:
    """Validate the arrays; returns their namespace."""
    xp = array_api.namespace(q=q, k=k, r_proj=r_proj, content_bias=content_bias,
                       position_bias=position_bias)
    _INPUTS.check(xp, q=q, k=k, r_proj=r_proj, content_bias=content_bias,
                  position_bias=position_bias)
    d_model = int(r_proj.shape[-2])
    if d_model < 2 or d_model % 2:
        raise ParameterError(f"r_proj has d_model={d_model} rows (shape {tuple(r_proj.shape)}): "
                             "the [sin | cos] table needs an even d_model >= 2")
    q_len, k_len = int(q.shape[-2]), int(k.shape[-2])
    if q_len > k_len:
        raise ParameterError(f"q_len={q_len} > k_len={k_len}: the keys hold the memory and the "
                             "current segment, so there are at least as many keys as queries "
                             f"(q has shape {tuple(q.shape)}, k {tuple(k.shape)})")
    shapes.broadcast_batch({"q": tuple(q.shape[:-2]), "k": tuple(k.shape[:-2]),
                      "r_proj": tuple(r_proj.shape[:-2]),
                      "content_bias": tuple(content_bias.shape[:-1]),
                      "position_bias": tuple(position_bias.shape[:-1])})
    return xp


def transformer_xl(
    q: Any, k: Any, r_proj: Any, content_bias: Any, position_bias: Any, *, causal: bool = True,
    method: str = "rel_shift", base: float = 10000.0, scale: float | None = None,
) -> Any:
    """Relative attention scores ``[..., q_len, k_len]`` of Transformer-XL (causal) or XLNet.

    ``s_ij = ((q_i + u)ᵀ k_j + (q_i + v)ᵀ (R_{i−j} W_R)) · scale`` with ``q`` ``[..., q_len, d]``,
    ``k`` ``[..., k_len, d]`` (memory then current segment), ``r_proj`` = ``W_R``
    ``[..., d_model, d]``, ``content_bias`` = ``u`` and ``position_bias`` = ``v`` ``[..., d]``
    (broadcast as ``[..., 1, d]``, e.g. per head ``[heads, d]``). Query row ``r`` sits at
    absolute position ``k_len − q_len + r``, key ``j`` at ``j``; ``R_t`` is the ``[sin | cos]``
    table of width ``d_model`` (``ω_i = base^(−2i/d_model)``). ``causal=True`` puts ``−inf`` on
    future keys (``j > i``); ``causal=False`` (XLNet) computes every entry. ``scale`` defaults to
    ``1/sqrt(d)``. ``method="rel_shift"`` is the pad-reshape-slice of Transformer-XL's Appendix B,
    ``"gather"`` indexes the per-distance products; both give the same numbers. Computed in
    float32 (float64 for float64 inputs), returned in the dtype of ``q``.
    """
    xp = _check(q, k, r_proj, content_bias, position_bias)
    causal = params.flag("causal", causal)
    params.choice("method", method, METHODS)
    base = params.base(base)
    if scale is not None:
        scale = params.float32_range("scale", params.positive("scale", scale))
    q_len, k_len, d = int(q.shape[-2]), int(k.shape[-2]), int(q.shape[-1])
    d_model = int(r_proj.shape[-2])
    compute = array_api.compute_dtype(xp, q.dtype)
    dev = array_api.device_of(q)
    qc, kc, wr, u, v = (xp.astype(a, compute, copy=False)
                        for a in (q, k, r_proj, content_bias, position_bias))
    s = 1.0 / math.sqrt(d) if scale is None else scale

    content = xp.matmul(qc + u[..., None, :], xp.matrix_transpose(kc))
    # distances a query row can see: k_len-1 (oldest key, last row) down to 0 (causal) or to
    # -(q_len-1) (bidirectional: the first query sees the newest key q_len-1 steps ahead)
    low = 0 if causal else 1 - q_len
    rows = xp.reshape(xp.arange(q_len, device=dev), (q_len, 1))
    cols = xp.reshape(xp.arange(k_len, device=dev), (1, k_len))
    if method == "rel_shift":
        dist = xp.arange(k_len - 1, low - 1, -1, dtype=compute, device=dev)
        position = _position_products(xp, qc + v[..., None, :], dist, wr, d_model, base, compute)
        position = _rel_shift(xp, position, q_len, k_len)
    else:
        dist = xp.arange(low, k_len, dtype=compute, device=dev)
        position = _position_products(xp, qc + v[..., None, :], dist, wr, d_model, base, compute)
        index = (k_len - q_len - low) + rows - cols  # row of distance (k_len - q_len + r) - j
        index = xp.where(index >= 0, index, xp.zeros_like(index))  # future keys, masked below
        lead = (1,) * (position.ndim - 2)
        position = xp.take_along_axis(position, xp.reshape(index, (*lead, q_len, k_len)),
                                      axis=-1)
    scores = (content + position) * s
    if causal:
        minus_inf = array_api.asarray(xp, -math.inf, dtype=compute, device=dev)
        scores = xp.where(cols - rows <= k_len - q_len, scores, minus_inf)
    return xp.astype(scores, q.dtype, copy=False)


def _position_products(xp: Any, qv: Any, dist: Any, wr: Any, d_model: int, base: float,
                       compute: Any) -> Any:
    """``(q + v) · (R_t W_R)`` for every distance ``t`` of ``dist``: ``[..., q_len, n_dist]``.

    ``R`` is Transformer-XL's PositionalEmbedding, posenc's ``sinusoidal(layout="concat")``:
    ``[sin(t ω) | cos(t ω)]``, ``ω_i = base^(−2i/d_model)`` (frequencies in float64 on the host).
    """
    freqs = base ** (-2.0 * np.arange(d_model // 2) / d_model)
    angles = dist[:, None] * array_api.asarray(xp, freqs, dtype=compute, device=array_api.device_of(dist))
    table = xp.concat([xp.sin(angles), xp.cos(angles)], axis=-1)
    return xp.matmul(qv, xp.matrix_transpose(xp.matmul(table, wr)))


def _rel_shift(xp: Any, x: Any, q_len: int, k_len: int) -> Any:
    """Transformer-XL's rel-shift: ``x[..., r, c]`` holds distance ``k_len − 1 − c`` (descending,
    n columns); returns ``out[..., r, j] = x[..., r, q_len − 1 − r + j]``, the column of distance
    ``(k_len − q_len + r) − j``. Pad one zero column in front, read the buffer with rows one
    longer, drop the first q_len entries: each row moves left by one more than the row above.
    Entries whose column would fall outside x (future keys when n = k_len) read the pad or the
    next row: only a causal mask makes them harmless."""
    lead = tuple(x.shape[:-2])
    n = int(x.shape[-1])
    padded = xp.concat([xp.zeros((*lead, q_len, 1), dtype=x.dtype, device=array_api.device_of(x)), x],
                       axis=-1)
    flat = xp.reshape(padded, (*lead, q_len * (n + 1)))[..., q_len:]
    return xp.reshape(flat, (*lead, q_len, n))[..., :k_len]


LAYERS = (Layer(
    "TransformerXLScores", "transformer_xl",
    weights=(Weight("content_bias", lambda c: (c["num_heads"], 1, c["head_dim"]), ZEROS),
             Weight("position_bias", lambda c: (c["num_heads"], 1, c["head_dim"]), ZEROS)),
    sizes=("num_heads", "head_dim"), config=("causal", "method", "base", "scale"),
    doc="Transformer-XL/XLNet scores with the trained biases u, v: layer(q, k, r_proj), "
        "q [..., heads, q_len, d]"),)
