"""FIRE (Li et al. 2023): a learned MLP of the progressively interpolated relative distance
``psi(|i - j|) / psi(max(L, i))``, ``psi(x) = log(c x + 1)``."""

from __future__ import annotations

from typing import Any

from .. import array_api, params, validation
from ..errors import ParameterError
from ..layers import ZEROS, Layer, Weight, normal

__all__ = ["fire"]

_INPUTS = validation.Inputs("fire", messages={
    "shape": "{inputs} must have shapes {patterns}, got {shapes}",
    "dtypes": "{names} must share one dtype, got {distinct}"})


def fire(q_len: int, k_len: int, w1: Any, b1: Any, w2: Any, b2: Any, *, c: float = 0.1,
         threshold: float = 512.0, eps: float = 0.0) -> Any:
    """FIRE bias ``[heads, q_len, k_len]`` from a one-hidden-layer MLP
    ``f(x) = relu(x * w1 + b1) @ w2 + b2`` (``w1, b1``: ``[hidden]``, ``w2``: ``[hidden, heads]``,
    ``b2``: ``[heads]``; one floating dtype, which the result has) applied to

        x(i, j) = psi(|i - j|) / (psi(max(threshold, i)) + eps),  psi(x) = log(c * x + 1).

    ``threshold`` is the paper's L (``|L_multiplier * init_L|`` in its code), ``c > 0`` the log
    scale; ``eps`` (default 0, the paper's formula) is the 1e-6 its appendix code adds to the
    denominator. Queries are aligned to the end of the keys (KV cache): query row ``r`` sits at
    ``i = k_len - q_len + r``. Entries with ``j > i`` use ``|i - j|`` like the paper's code;
    a causal mask removes them. Distances are exact integers; everything runs in float32
    (float64 for float64 inputs) and the result is cast back.
    """
    xp = array_api.namespace(w1=w1, b1=b1, w2=w2, b2=b2)
    q_len, k_len = params.query_lengths(q_len, k_len)
    c = params.float32_range("c", params.positive("c", c))
    threshold = params.float32_range("threshold", params.positive("threshold", threshold))
    if isinstance(eps, bool) or not isinstance(eps, int | float) or not 0 <= eps < float("inf"):
        raise ParameterError(f"eps={eps!r} must be a finite number >= 0")
    named = {"w1": w1, "b1": b1, "w2": w2, "b2": b2}
    sizes = _INPUTS.check(xp, **named)
    heads = sizes["heads"]
    params.bias_entries(int(heads), q_len, k_len)
    compute = array_api.compute_dtype(xp, w1.dtype)
    device = array_api.device_of(w1)

    keys = array_api.arange(xp, 0, k_len, device)
    queries = array_api.arange(xp, k_len - q_len, k_len, device)
    distance = xp.abs(xp.reshape(queries, (q_len, 1)) - xp.reshape(keys, (1, k_len)))
    position = xp.astype(queries, compute)
    normalizer = xp.maximum(position, xp.full_like(position, threshold))
    denominator = xp.log1p(c * normalizer) + eps
    x = xp.log1p(c * xp.astype(distance, compute)) / xp.reshape(denominator, (q_len, 1))

    w1, b1, w2, b2 = (xp.astype(a, compute) for a in (w1, b1, w2, b2))
    # One hidden unit at a time, with elementwise float ops only: no matmul, which TensorFlow
    # and JAX run in TF32 on recent GPUs (errors of 1e-3 in float32). The width is small
    # (32 in the paper) and memory stays O(heads * q_len * k_len).
    out = xp.zeros((heads, q_len, k_len), dtype=compute, device=device) + xp.reshape(
        b2, (heads, 1, 1))
    for unit in range(int(sizes["hidden"])):
        h = x * w1[unit] + b1[unit]
        h = xp.maximum(h, xp.zeros_like(h))
        out = out + xp.reshape(w2[unit, :], (heads, 1, 1)) * h
    return xp.astype(out, named["w1"].dtype, copy=False)


LAYERS = (Layer(
    "FIREBias", "fire",
    weights=(Weight("w1", lambda c: (c["hidden"],), normal(1.0)),
             Weight("b1", lambda c: (c["hidden"],), ZEROS),
             Weight("w2", lambda c: (c["hidden"], c["num_heads"]), normal(0.1)),
             Weight("b2", lambda c: (c["num_heads"],), ZEROS)),
    sizes=("num_heads", "hidden"), size_defaults={"hidden": 32},
    config=("c", "threshold", "eps"),
    doc="FIRE's MLP of the interpolated distance: layer(q_len, k_len) -> [heads, q, k]"),)
