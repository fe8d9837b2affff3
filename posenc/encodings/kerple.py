"""KERPLE (Chi et al. 2022): a per-head bias from a conditionally positive definite kernel of
the distance, ``-r1 * log(1 + r2 * |i - j|)`` (log form) or ``-r1 * |i - j|**r2`` (power)."""

from __future__ import annotations

from typing import Any

from .. import array_api, params, validation
from ..errors import ParameterError
from ..layers import Layer, Weight, uniform

__all__ = ["kerple"]

FORMS = ("log", "power")

_INPUTS = validation.Inputs("kerple", messages={
    "shape": "r1 and r2 must both have shape [heads], got {shapes_and}",
    "dtypes": "{names} must share one dtype, got {dtypes_and}"})


def kerple(q_len: int, k_len: int, r1: Any, r2: Any, *, form: str = "log") -> Any:
    """KERPLE bias ``[heads, q_len, k_len]`` for per-head parameters ``r1``, ``r2`` (``[heads]``,
    floating, one dtype; the result has that dtype).

    - ``log``: ``-r1 * log(1 + r2 * |i - j|)`` (evaluated with log1p), ``r1, r2 > 0``;
    - ``power``: ``-r1 * |i - j|**r2``, ``r1 > 0``, ``0 < r2 <= 2``.

    Queries are aligned to the end of the keys (KV cache): query row ``r`` sits at position
    ``i = k_len - q_len + r``. Every entry is the kernel of ``|i - j|``, also where ``j > i``
    (the official code zeroes those entries; a causal mask removes them either way).
    Distances are exact integers; the kernel runs in float32 (float64 for float64 inputs).

    Parameters outside their range raise :class:`~posenc.errors.ParameterError` in eager mode.
    Inside jax.jit / torch.compile / tf.function their values cannot be inspected: the heads
    with such a parameter get NaN in every entry instead (loud, never a plausible bias).
    """
    xp = array_api.namespace(r1=r1, r2=r2)
    params.choice("form", form, FORMS)
    q_len, k_len = params.query_lengths(q_len, k_len)
    _INPUTS.check(xp, r1=r1, r2=r2)
    heads = int(r1.shape[0])
    params.bias_entries(heads, q_len, k_len)
    compute = array_api.compute_dtype(xp, r1.dtype)
    a, b = xp.astype(r1, compute), xp.astype(r2, compute)
    # finite and > 0 (NaN fails both comparisons); the power kernel is CPD only for r2 <= 2
    r2_high = 2.0 if form == "power" else float("inf")
    bad_r1 = ~((a > 0) & (a < float("inf")))
    bad_r2 = ~((b > 0) & (b <= r2_high) & (b < float("inf")))
    if not array_api.is_traced(r1):
        _check(xp, "r1", r1, bad_r1, "must be finite and > 0")
        _check(xp, "r2", r2, bad_r2,
               "must be > 0 and <= 2 for form='power'" if form == "power"
               else "must be finite and > 0")

    device = array_api.device_of(r1)
    keys = array_api.arange(xp, 0, k_len, device)
    queries = array_api.arange(xp, k_len - q_len, k_len, device)
    distance = xp.abs(xp.reshape(queries, (q_len, 1)) - xp.reshape(keys, (1, k_len)))
    distance = xp.reshape(xp.astype(distance, compute), (1, q_len, k_len))
    a, b = xp.reshape(a, (heads, 1, 1)), xp.reshape(b, (heads, 1, 1))
    if form == "log":
        bias = -(a * xp.log1p(b * distance))
    else:
        bias = -(a * xp.pow(distance, b))
    bad = xp.reshape(bad_r1 | bad_r2, (heads, 1, 1))
    nan = xp.full((1, 1, 1), float("nan"), dtype=compute, device=device)
    bias = xp.where(bad, nan, bias)
    return xp.astype(bias, r1.dtype, copy=False)


def _check(xp: Any, name: str, values: Any, bad: Any, requirement: str) -> None:
    if not bool(xp.any(bad)):
        return
    for h in range(int(values.shape[0])):  # eager only, and only once a bad head exists
        if bool(bad[h]):
            raise ParameterError(
                f"{name}[{h}]={float(values[h])!r} {requirement} (KERPLE's per-head parameters)")


LAYERS = (Layer(
    "KERPLEBias", "kerple",
    weights=(Weight("r1", lambda c: (c["num_heads"],), uniform(0.5, 1.0)),
             Weight("r2", lambda c: (c["num_heads"],), uniform(0.5, 1.0))),
    sizes=("num_heads",), config=("form",),
    doc="KERPLE's per-head kernel bias: layer(q_len, k_len) -> [heads, q, k]"),)
