"""Shaw et al. (2018) relative position representations: learned vectors for the clipped
relative distance ``key − query`` added to the keys (scores) and to the values (outputs).

Neither function materialises a ``[q_len, k_len, d]`` tensor (the tensor2tensor way): the key
term gathers from the small ``q @ table_kᵀ`` product, and the value term first folds the
attention weights into one weight per table row (diagonals of the weight matrix, plus the
tail sums of the two clipped end rows), then multiplies by ``table_v``.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .. import array_api, params, shapes, validation
from ..errors import ParameterError
from ..layers import Layer, Weight, normal

# the module, not the name: a sibling may still be initialising when posenc's lazy
# __getattr__ imports every encoding module recursively
from . import attention as _attention

__all__ = ["shaw_attention", "shaw_scores"]


def _table_width(fields: dict[str, Any]) -> str:
    """A table's width disagrees with d (q and k) or d_v (v)."""
    if fields["name"] == "k":
        return _attention.SCORE_MESSAGES["axis:d"].format(**fields)
    return (f"{fields['name']} has shape {fields['shape']}, expected width {fields['first_size']}"
            f" (the last dim of {'q and k' if fields['axis'] == 'd' else 'v'})")


_MESSAGES = {
    **_attention.SCORE_MESSAGES, "axis:d": _table_width, "axis:d_v": _table_width,
    "rank:table_k": "table_k must have shape [2*max_relative_position + 1, d], got shape {shape}",
    "rank:table_v": "table_v must have shape [2*max_relative_position + 1, d_v], got shape "
                    "{shape}",
    "dtypes": "{commas} must share one dtype, got {listed}"}
_SCORES = validation.Inputs("shaw_scores", messages=_MESSAGES)
_ATTENTION = validation.Inputs("shaw_attention", messages=_MESSAGES)


def _validate(xp: ModuleType, arrays: dict[str, Any], table_k: Any, table_v: Any,
              max_relative_position: Any, scale: Any, mask: Any = None) -> tuple[int, float]:
    """Checks shared by both functions; returns ``(K, scale)``."""
    K = params.size("max_relative_position", max_relative_position, minimum=0)
    if scale is not None:
        params.float32_range("scale", params.positive("scale", scale))
    rows = 2 * K + 1
    tables = {"table_k": table_k} if table_v is None else {"table_k": table_k,
                                                           "table_v": table_v}
    if "v" in arrays:
        _ATTENTION.check(xp, **arrays, **tables, mask=mask)
    else:
        _SCORES.check(xp, **arrays, **tables)
    q, k = arrays["q"], arrays["k"]
    shapes.check_queries_within_keys(tuple(q.shape), tuple(k.shape))
    for name, t in tables.items():  # the widths: checked with the declared inputs
        if t.shape[0] != rows:
            raise ParameterError(
                f"{name} has shape {tuple(t.shape)}, expected {rows} rows "
                f"(2*max_relative_position + 1 for max_relative_position={K})")
    return K, params.default_scale(scale, tuple(q.shape))


def _offset_and_reach(K: int, q_len: Any, k_len: Any) -> tuple[Any, int]:
    """Query row r sits at absolute position ``offset + r``. Relative distances lie in
    ``[-(k_len - 1), k_len - 1]``, so K beyond ``k_len - 1`` clips nothing: the effective K
    ``K_eff = min(K, k_len - 1)`` gives the same rows and lets the unreachable rows of the
    tables be sliced off (K = 10_000 costs nothing)."""
    reach = k_len - 1 if k_len >= 1 else 0
    return k_len - q_len, (K if K <= reach else reach)


def _bucket_index(xp: ModuleType, q_len: Any, k_len: Any, offset: Any, K: int,
                  device: Any) -> Any:
    """``clip(j − (offset + i), −K, K) + K``, shape [q_len, k_len]."""
    keys, queries = array_api.arange(xp, 0, k_len, device), array_api.arange(xp, 0, q_len, device)
    rel = keys[None, :] - (queries + offset)[:, None]
    # where() rather than clip(): array-api-compat's torch clip breaks on symbolic bounds
    rel = xp.where(rel < -K, xp.full_like(rel, -K), rel)
    rel = xp.where(rel > K, xp.full_like(rel, K), rel)
    return rel + K


def _take_last(xp: ModuleType, x: Any, index: Any) -> Any:
    """``take_along_axis`` on the last axis with a [q, n] index broadcast over x's batch."""
    index = xp.broadcast_to(index, (*x.shape[:-2], *index.shape))
    return xp.take_along_axis(x, index, axis=-1)


def _relative_scores(xp: ModuleType, qc: Any, kc: Any, tk: Any, K: int, offset: Any,
                     s: float) -> Any:
    q_len, k_len = qc.shape[-2], kc.shape[-2]
    per_row = xp.matmul(qc, xp.matrix_transpose(tk))  # [..., q_len, 2K + 1]
    index = _bucket_index(xp, q_len, k_len, offset, K, array_api.device_of(qc))
    return (xp.matmul(qc, xp.matrix_transpose(kc)) + _take_last(xp, per_row, index)) * s


def _bucket_weights(xp: ModuleType, a: Any, K: int, offset: Any) -> Any:
    """``w[..., i, r] = Σ_{j : clip(j − p_i, −K, K) = r − K} a[..., i, j]``, [..., q_len, 2K + 1].

    Without a one-hot: an interior row r (|r − K| < K) is one diagonal entry of ``a``; the
    two clipped end rows are tail sums of a's row, read off its cumulative sum.
    """
    if K == 0:  # one row, which every key uses
        return xp.sum(a, axis=-1, keepdims=True)
    q_len, k_len = a.shape[-2], a.shape[-1]
    device = array_api.device_of(a)
    pos = (array_api.arange(xp, 0, q_len, device) + offset)[:, None]  # [q_len, 1]
    zeros = xp.zeros_like(pos)
    # cum[..., i, n] = Σ_{j < n} a[..., i, j], n = 0..k_len
    cum = xp.cumulative_sum(a, axis=-1, include_initial=True)
    low_end = pos - K + 1  # keys j <= p - K, i.e. j < p - K + 1
    low_end = xp.where(low_end < 0, zeros, low_end)
    high_start = pos + K  # keys j >= p + K
    high_start = xp.where(high_start > k_len, xp.full_like(pos, k_len), high_start)
    low = _take_last(xp, cum, low_end)
    high = cum[..., k_len:] - _take_last(xp, cum, high_start)
    keys = pos + array_api.arange(xp, 0, 2 * K - 1, device)[None, :] - (K - 1)  # [q_len, 2K - 1]
    inside = (keys >= 0) & (keys < k_len)
    diagonal = _take_last(xp, a, xp.where(inside, keys, xp.zeros_like(keys)))
    diagonal = xp.where(inside, diagonal, xp.zeros_like(diagonal))
    return xp.concat([low, diagonal, high], axis=-1)


def shaw_scores(
    q: Any, k: Any, table_k: Any, *, max_relative_position: int, scale: float | None = None,
) -> Any:
    """Shaw relative attention scores ``s_ij = q_i · (k_j + table_k[clip(j − p_i, −K, K) + K])
    · scale``; shape ``[..., q_len, k_len]``, dtype of q.

    ``q`` ``[..., q_len, d]``, ``k`` ``[..., k_len, d]`` (leading dims broadcast), ``table_k``
    ``[2K + 1, d]`` shared by every head, ``K = max_relative_position`` (0 allowed: one row
    shared by every pair, i.e. no position information). The relative distance is
    key − query (Shaw/tensor2tensor). Queries are aligned to the end of the keys (KV cache):
    query row r sits at position ``p_r = k_len − q_len + r``; ``q_len > k_len`` is an error.
    ``scale`` defaults to ``1/sqrt(d)`` (with ``d = 0`` it must be given: the scores are then
    0). Computed in float32 (float64 for float64 inputs).
    """
    xp = array_api.namespace(q=q, k=k, table_k=table_k)
    K, s = _validate(xp, {"q": q, "k": k}, table_k, None, max_relative_position, scale)
    shapes.broadcast_batch({"q": tuple(q.shape[:-2]), "k": tuple(k.shape[:-2])})
    compute = array_api.compute_dtype(xp, q.dtype)
    offset, K_eff = _offset_and_reach(K, q.shape[-2], k.shape[-2])
    qc, kc, tk = (xp.astype(a, compute, copy=False) for a in (q, k, table_k))
    tk = tk[K - K_eff:K + K_eff + 1, :]
    return xp.astype(_relative_scores(xp, qc, kc, tk, K_eff, offset, s), q.dtype, copy=False)


def shaw_attention(
    q: Any, k: Any, v: Any, table_k: Any, table_v: Any = None, *, max_relative_position: int,
    mask: Any = None, scale: float | None = None,
) -> Any:
    """Shaw relative attention ``o_i = Σ_j a_ij (v_j + table_v[clip(j − p_i, −K, K) + K])``
    with ``a = softmax_j`` of :func:`shaw_scores` (where ``mask``); shape ``[..., q_len, d_v]``.

    ``v`` ``[..., k_len, d_v]``; ``table_v`` ``[2K + 1, d_v]`` or None (no value term, as in
    transformers' ``relative_key``). ``mask`` (bool, True = may attend) broadcasts against
    ``[..., q_len, k_len]`` and is applied after the relative term, as in
    :func:`posenc.attention`; a query with every key masked gives a zero row (k_len = 0, hence
    q_len = 0, gives an empty ``[..., 0, d_v]``). Positions and
    conventions as in :func:`shaw_scores`. Computed in float32 (float64 for float64 inputs).
    """
    xp = array_api.namespace(q=q, k=k, v=v, table_k=table_k, table_v=table_v, mask=mask)
    K, s = _validate(xp, {"q": q, "k": k, "v": v}, table_k, table_v, max_relative_position,
                     scale, mask)
    batch = shapes.broadcast_batch({"q": tuple(q.shape[:-2]), "k": tuple(k.shape[:-2]),
                                     "v": tuple(v.shape[:-2])})
    scores_shape = (*batch, int(q.shape[-2]), int(k.shape[-2]))
    if mask is not None:
        shapes.check_broadcasts_to("mask", tuple(mask.shape), scores_shape,
                                    "[..., q_len, k_len]")

    compute = array_api.compute_dtype(xp, q.dtype)
    offset, K_eff = _offset_and_reach(K, q.shape[-2], k.shape[-2])
    rows = slice(K - K_eff, K + K_eff + 1)
    qc, kc, vc, tk = (xp.astype(a, compute, copy=False) for a in (q, k, v, table_k))
    scores = _relative_scores(xp, qc, kc, tk[rows, :], K_eff, offset, s)
    weights = _attention.softmax_where(xp, scores, mask)
    out = xp.matmul(weights, vc)
    if table_v is not None:
        tv = xp.astype(table_v, compute, copy=False)[rows, :]
        out = out + xp.matmul(_bucket_weights(xp, weights, K_eff, offset), tv)
    return xp.astype(out, q.dtype, copy=False)


LAYERS = (
    Layer("ShawRelativeScores", "shaw_scores",
          weights=(Weight("table_k", lambda c: (2 * c["max_relative_position"] + 1,
                                                c["head_dim"]), normal(0.02)),),
          sizes=("head_dim",), config=("max_relative_position", "scale"),
          doc="Shaw et al.'s relative-key scores: layer(q, k) -> [..., q, k]"),
    Layer("ShawRelativeAttention", "shaw_attention",
          weights=(Weight("table_k", lambda c: (2 * c["max_relative_position"] + 1,
                                                c["head_dim"]), normal(0.02)),
                   Weight("table_v", lambda c: (2 * c["max_relative_position"] + 1,
                                                c["value_dim"]), normal(0.02),
                          optional="value_dim")),
          sizes=("head_dim", "value_dim"), size_defaults={"value_dim": None},
          config=("max_relative_position", "scale"),
          doc="attention with relative keys (and values, given value_dim): "
              "layer(q, k, v, mask=None)"),
)
