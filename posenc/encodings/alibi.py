"""ALiBi (Press et al. 2022): per-head slopes and the linear attention bias they scale."""

from __future__ import annotations

import math
from typing import Any

from .. import array_api, params
from ..layers import Layer

__all__ = ["alibi_bias", "alibi_slopes"]

FORMS = ("causal", "key_only", "symmetric")


def _slope_values(num_heads: int, max_bias: float) -> list[float]:
    """The slopes as Python floats (float64), from the static parameters only.

    ``base = 2**floor(log2 num_heads)``: slopes ``2**(-max_bias*h/base)`` for h = 1..base, then
    the odd-h slopes ``2**(-max_bias*h/(2*base))``, h = 1, 3, 5, ..., until there are
    ``num_heads``. Each slope is one ``2.0 ** exponent`` (dividing by a power of two is exact),
    never a product of rounded ratios as in the original recurrence.
    """
    base = 1 << (num_heads.bit_length() - 1)
    exponents = [max_bias * h / base for h in range(1, base + 1)]
    exponents += [max_bias * h / (2 * base) for h in range(1, 2 * (num_heads - base), 2)]
    return [2.0 ** -e for e in exponents]


def _check_static(num_heads: Any, max_bias: Any) -> tuple[int, float]:
    num_heads = params.width("num_heads", num_heads)
    max_bias = params.positive("max_bias", max_bias)
    return num_heads, max_bias


def alibi_slopes(num_heads: int, *, max_bias: float = 8.0, dtype: Any = None,
                 device: Any = None) -> Any:
    """ALiBi head slopes, shape ``[num_heads]``.

    For ``n`` a power of two, ``m_h = 2**(-max_bias * h / n)``, h = 1..n (the geometric
    sequence that starts at, and has ratio, ``2**(-max_bias/n)``). Otherwise the slopes of
    ``2**floor(log2 n)`` heads followed by every other slope (the odd powers) of the
    sequence for twice that many heads, until there are ``n`` (Press et al.'s ``get_slopes``).
    The slopes are computed on the host in float64 and cast to ``dtype`` (float32 by default),
    an array of the library that defines ``dtype`` (NumPy when None), placed on ``device``.
    """
    num_heads, max_bias = _check_static(num_heads, max_bias)
    xp = array_api.namespace_of_dtype(dtype)
    out = array_api.output_dtype(xp, dtype)
    return array_api.asarray(xp, _slope_values(num_heads, max_bias), dtype=out, device=device)


def alibi_bias(num_heads: int, q_len: int, k_len: int, *, form: str = "causal",
               max_bias: float = 8.0, head_dim: int | None = None, dtype: Any = None,
               device: Any = None) -> Any:
    """ALiBi attention bias, shape ``[num_heads, q_len, k_len]`` (``[num_heads, 1, k_len]``
    for ``form="key_only"``), to add to the attention scores of each head.

    Queries are aligned to the end of the keys (decoding with a KV cache): query row ``r``
    sits at absolute position ``i = k_len - q_len + r`` and key column ``j`` at ``j``.

    - ``causal``: ``-m_h * (i - j)``, defined for every ``(i, j)``; entries with ``j > i`` are
      positive and must be removed by the causal mask.
    - ``key_only``: ``m_h * j``, one row that broadcasts over the queries (BLOOM, keras-hub,
      fairseq). Under a causal mask it gives the same softmax as ``causal``: the two differ by
      ``m_h * i``, constant along each row.
    - ``symmetric``: ``-m_h * |i - j|`` (bidirectional attention; x-transformers, MPT-style).

    ``head_dim``: Falcon's order. Falcon adds the bias to ``q kᵀ`` before the ``1/sqrt(head_dim)``
    scaling, ``softmax((q kᵀ + B) / sqrt(d))``, which is ``softmax(q kᵀ / sqrt(d) + B / sqrt(d))``:
    given ``head_dim``, the bias returned is ``B / sqrt(head_dim)``, to add after the scaling as
    for every other model (None: BLOOM's order, the bias as is).

    Distances are exact integers, converted to float32 (float64 for float64 output) and
    scaled there by the slopes (divided by ``sqrt(head_dim)`` in float64 on the host); the
    result is cast to ``dtype`` (float32 by default), an array of the library that defines
    ``dtype`` (NumPy when None), placed on ``device``.
    """
    num_heads, max_bias = _check_static(num_heads, max_bias)
    q_len, k_len = params.query_lengths(q_len, k_len)
    params.choice("form", form, FORMS)
    params.bias_entries(num_heads, 1 if form == "key_only" else q_len, k_len)
    values = _slope_values(num_heads, max_bias)
    if head_dim is not None:  # Falcon: (q kᵀ + B) / sqrt(d) = q kᵀ / sqrt(d) + B / sqrt(d)
        root = math.sqrt(params.width("head_dim", head_dim))
        values = [m / root for m in values]
    xp = array_api.namespace_of_dtype(dtype)
    out = array_api.output_dtype(xp, dtype)
    compute = array_api.compute_dtype(xp, out)

    slopes = array_api.asarray(xp, values, dtype=compute, device=device)
    slopes = xp.reshape(slopes, (num_heads, 1, 1))
    keys = array_api.arange(xp, 0, k_len, device)
    if form == "key_only":
        bias = slopes * xp.reshape(xp.astype(keys, compute), (1, 1, k_len))
    else:
        queries = array_api.arange(xp, k_len - q_len, k_len, device)
        # j - i in integers, negated before scaling so that distance 0 gives +0.0, not -0.0
        relative = xp.reshape(keys, (1, k_len)) - xp.reshape(queries, (q_len, 1))
        if form == "symmetric":
            relative = -xp.abs(relative)
        bias = slopes * xp.reshape(xp.astype(relative, compute), (1, q_len, k_len))
    return xp.astype(bias, out, copy=False)


LAYERS = (Layer(
    "ALiBiBias", "alibi_bias", config=("num_heads", "form", "max_bias", "head_dim"),
    doc="ALiBi's fixed linear biases: layer(q_len, k_len) -> [heads, q, k]"),)
