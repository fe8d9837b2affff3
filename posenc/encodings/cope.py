"""CoPE, contextual position encoding (Golovneva et al. 2024): positions counted by gates that
depend on the content, ``p_ij = Σ_{t=j..i} sigmoid(scale · q_i·k_t)``, and the positional
logit ``q_i · E[p_ij]`` interpolated between the integer rows of a learned table ``E``.

The term depends on every ``q_i·k_t``, so it costs O(q_len · k_len · d) like the scores
themselves; what it holds is a few ``[..., q_len, k_len]`` arrays and the small
``q @ Eᵀ`` (``[..., q_len, npos_max]``), from which the floor and ceiling rows are gathered:
no ``[q_len, k_len, npos_max]`` or ``[q_len, k_len, d]`` tensor is built.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .. import array_api, params, shapes
from ..errors import ParameterError
from ..layers import Layer, Weight, normal

__all__ = ["cope"]


def cope(q: Any, k: Any, pos_emb: Any, key_mask: Any = None, *, npos_max: int,
         scale: float | None = None, causal: bool = True) -> Any:
    """The CoPE term ``z_ij`` to add to the attention logits, ``[..., q_len, k_len]``, dtype of q.

    ``g_it = sigmoid(scale · q_i·k_t)`` (``scale`` defaults to ``1/sqrt(d)``),
    ``p_ij = min(Σ_{t=j..i} g_it, npos_max − 1)`` and, with ``e_n = q_i · pos_emb[n]``,
    ``z_ij = (p − ⌊p⌋)·e_⌈p⌉ + (1 − (p − ⌊p⌋))·e_⌊p⌋``.

    ``q`` ``[..., q_len, d]`` and ``k`` ``[..., k_len, d]`` (leading dims broadcast),
    ``pos_emb`` ``[npos_max, d]`` (the transpose of the paper's ``[1, d, npos_max]``
    parameter), one floating dtype. Queries are aligned to the end of the keys (KV cache):
    query row r sits at position ``i = k_len − q_len + r``. ``causal``: gates of keys after the
    query are 0 and ``z_ij = 0`` for ``j > i`` (mask those logits as usual); otherwise every
    key's gate counts, ``p_ij = Σ_{t>=j} g_it``. ``key_mask`` ``[batch, k_len]`` (bool, True =
    a real key, False = padding; ``batch`` is the first leading dim of q and k, 1 when they have
    none): the gates of padded keys are 0, so they add no position, and ``z_ij = 0`` on them.
    Computed in float32 (float64 for float64 inputs), the cumulative sum included.
    """
    xp = array_api.namespace(q=q, k=k, pos_emb=pos_emb, key_mask=key_mask)
    npos_max = params.size("npos_max", npos_max, minimum=1)
    causal = params.flag("causal", causal)
    _validate(xp, q, k, pos_emb, npos_max)
    s = params.default_scale(scale, tuple(q.shape))
    batch = shapes.broadcast_batch({"q": tuple(q.shape[:-2]), "k": tuple(k.shape[:-2])})
    keep = None if key_mask is None else _key_mask(xp, key_mask, batch, int(k.shape[-2]))
    q_len, k_len = int(q.shape[-2]), int(k.shape[-2])
    compute = array_api.compute_dtype(xp, q.dtype)
    qc, kc, table = (xp.astype(a, compute, copy=False) for a in (q, k, pos_emb))
    device = array_api.device_of(q)

    gates = _sigmoid(xp, xp.matmul(qc, xp.matrix_transpose(kc)) * s)
    gates = xp.broadcast_to(gates, (*batch, q_len, k_len))
    zero = xp.zeros_like(gates)
    if causal:
        keys = _arange(xp, k_len, device)
        queries = _arange(xp, q_len, device) + (k_len - q_len)
        seen = xp.reshape(keys, (1, k_len)) <= xp.reshape(queries, (q_len, 1))
        gates = xp.where(seen, gates, zero)
    if keep is not None:
        gates = xp.where(keep, gates, zero)
    # p_ij = Σ_{t >= j} g_it: a cumulative sum from the last key (flipped, not total − prefix,
    # which cancels catastrophically for long rows)
    positions = xp.flip(xp.cumulative_sum(xp.flip(gates, axis=-1), axis=-1), axis=-1)
    top = float(npos_max - 1)
    positions = xp.where(positions > top, xp.full_like(positions, top), positions)

    low = xp.floor(positions)
    weight = positions - low  # differentiable in the gates; floor and ceil are not
    per_row = xp.matmul(qc, xp.matrix_transpose(table))  # e_n = q_i · E[n], [..., q, npos]
    per_row = xp.broadcast_to(per_row, (*batch, q_len, npos_max))
    index = _arange(xp, 0, device).dtype  # the default integer: int64, or jax's int32
    e_low = xp.take_along_axis(per_row, xp.astype(low, index), axis=-1)
    e_high = xp.take_along_axis(per_row, xp.astype(xp.ceil(positions), index), axis=-1)
    term = weight * e_high + (1 - weight) * e_low
    if causal:
        term = xp.where(seen, term, zero)
    if keep is not None:
        term = xp.where(keep, term, zero)
    return xp.astype(term, q.dtype, copy=False)


def _sigmoid(xp: ModuleType, x: Any) -> Any:
    """``1 / (1 + exp(−x))`` without overflow: exp of −|x| only."""
    z = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1 / (1 + z), z / (1 + z))


def _arange(xp: ModuleType, n: int, device: Any) -> Any:
    return xp.arange(n) if device is None else xp.arange(n, device=device)


def _key_mask(xp: ModuleType, key_mask: Any, batch: tuple[int, ...], k_len: int) -> Any:
    """key_mask [batch, k_len] reshaped to broadcast against [*batch, q_len, k_len]."""
    if not hasattr(key_mask, "dtype") or not hasattr(key_mask, "shape"):
        raise ParameterError(f"key_mask must be an array, got {type(key_mask).__name__}")
    if array_api.dtype_name(key_mask.dtype) != "bool":
        raise ParameterError(f"key_mask must be boolean (True = a real key, False = padding), "
                             f"got dtype {array_api.dtype_name(key_mask.dtype)}")
    first = batch[0] if batch else 1
    shape = tuple(int(n) for n in key_mask.shape)
    if len(shape) != 2 or shape[1] != k_len or shape[0] not in (first, 1):
        raise ParameterError(
            f"key_mask has shape {shape} but q and k have leading dims {batch} and "
            f"k_len={k_len}: key_mask must be [batch, k_len] = [{first}, {k_len}] (batch: the "
            "first leading dim of q and k, 1 when they have none)")
    return xp.reshape(key_mask, (shape[0], *([1] * max(len(batch) - 1, 0)), 1, k_len)
                      if batch else (1, k_len))


def _validate(xp: ModuleType, q: Any, k: Any, pos_emb: Any, npos_max: int) -> None:
    named = {"q": q, "k": k, "pos_emb": pos_emb}
    for name, a in named.items():
        if not hasattr(a, "dtype") or not hasattr(a, "shape"):
            raise ParameterError(f"{name} must be an array, got {type(a).__name__}")
        array_api.check_floating(xp, name, a)
    for name in ("q", "k"):
        if named[name].ndim < 2:
            raise ParameterError(f"{name} must have at least 2 dims [..., len, d], got shape "
                                 f"{tuple(named[name].shape)}")
    if pos_emb.ndim != 2:
        raise ParameterError(f"pos_emb must have shape [npos_max, d], got shape "
                             f"{tuple(pos_emb.shape)}")
    dtypes = {array_api.dtype_name(a.dtype) for a in named.values()}
    if len(dtypes) > 1:
        described = ", ".join(f"{n} {array_api.dtype_name(a.dtype)}" for n, a in named.items())
        raise ParameterError(f"q, k and pos_emb must share one dtype, got {described}")
    d = q.shape[-1]
    if k.shape[-1] != d:
        raise ParameterError(f"q and k must have the same last dim d, got shapes "
                             f"{tuple(q.shape)} and {tuple(k.shape)}")
    if pos_emb.shape[0] != npos_max:
        raise ParameterError(f"pos_emb has shape {tuple(pos_emb.shape)}: {pos_emb.shape[0]} rows, "
                             f"expected npos_max={npos_max}")
    if pos_emb.shape[1] != d:
        raise ParameterError(f"pos_emb has shape {tuple(pos_emb.shape)}: width "
                             f"{pos_emb.shape[1]}, expected d={d} (the last dim of q and k)")
    shapes.check_queries_within_keys(tuple(q.shape), tuple(k.shape))


LAYERS = (Layer(
    "CoPEBias", "cope",
    # the paper initialises the table to zeros; a small normal (like posenc's other tables)
    # gives a first step with a non-zero term and gradient through q
    weights=(Weight("pos_emb", lambda c: (c["npos_max"], c["head_dim"]), normal(0.02)),),
    sizes=("head_dim",), config=("npos_max", "scale", "causal"),
    doc="CoPE's position embeddings [npos_max, head_dim]: layer(q, k) -> the term "
        "[..., q, k] to add to the attention logits"),)
