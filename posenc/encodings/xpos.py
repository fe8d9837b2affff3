"""xPos (Sun et al. 2022): rotary embedding whose pairs are scaled by ``zeta_i ** (±(n - c) / scale_base)``.

Queries are scaled by ``zeta_i ** (+(n - c) / scale_base)`` and keys by its reciprocal, so the
logit of a query at ``m`` and a key at ``n`` carries ``zeta_i ** ((m - n) / scale_base)``: it
depends on the positions only through ``m - n`` and not on the centre ``c``, which exists only
to keep the two factors finite (``zeta_0 ** (n / 512)`` leaves float32 near ``n = 36000``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import array_api, params
from ..errors import ParameterError
from ..layers import Layer
from ..rotary import rotation

__all__ = ["xpos"]

KINDS = ("query", "key")
GAMMA = 0.4  # the paper's gamma: zeta_i = (2i/r + gamma) / (1 + gamma)


def zeta(rotary_dim: int) -> list[float]:
    """``zeta_i = (2i/r + 0.4) / 1.4``, ``i = 0..r/2-1``, as Python floats: host constants that
    torch.compile folds (NumPy would be traced into the graph)."""
    return [(2.0 * i / rotary_dim + GAMMA) / (1.0 + GAMMA) for i in range(rotary_dim // 2)]


def _finite(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ParameterError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    if not -math.inf < value < math.inf:  # comparisons: torch.compile traces floats symbolically
        raise ParameterError(f"{name}={value!r} must be a finite number")
    return float(value)


def _check_scale_range(xp: Any, span: tuple[float, float], centre: float, scale_base: float,
                       dtype: Any) -> None:
    """Eager check that the largest factor, ``zeta_0 ** (|n - c| / scale_base)`` for the
    farthest position, is finite in ``dtype`` (beyond it, keys become inf and queries 0)."""
    far = max(abs(span[0] - centre), abs(span[1] - centre))
    # |n - c| at which zeta_0 ** -(|n - c| / scale_base) reaches the dtype's largest value
    limit = math.log(float(xp.finfo(dtype).max)) / -math.log(zeta(2)[0]) * scale_base
    if far > limit:
        name = array_api.dtype_name(dtype)
        raise ParameterError(
            f"positions reach |n - centre| = {far:g} with scale_base={scale_base:g}: the xPos "
            f"factor zeta**((n - centre)/scale_base) leaves the {name} range beyond "
            f"|n - centre| = {limit:.0f}; centre the positions (centre=), raise scale_base, or "
            "use float64")


def xpos(
    x: Any, positions: Any = None, *, kind: str = "query", scale_base: float = 512.0,
    centre: float = 0.0, base: float = 10000.0, layout: str = "interleaved",
    rotary_dim: int | None = None,
) -> Any:
    """Rotate ``x`` (``[..., seq, dim]``) as RoPE does and scale each rotated pair; same shape
    and dtype as ``x``.

    Pair ``i`` at position ``n`` is rotated by ``n * base^(-2i/r)`` and multiplied by
    ``zeta_i ** (s * (n - centre) / scale_base)``, ``zeta_i = (2i/r + 0.4) / 1.4``, with
    ``s = +1`` for ``kind="query"`` and ``-1`` for ``kind="key"``; ``r = rotary_dim`` (default
    ``dim``), features ``r..`` pass through unchanged. Queries and keys must use the same
    ``centre`` and ``scale_base``: their logits then do not depend on the centre.
    ``positions``: ``[seq]`` or ``[batch, seq]`` (left padding; applies to ``x[b, ..., s, :]``),
    integers or float32/float64; default ``arange(seq)``. ``layout``: ``"interleaved"`` pairs
    ``(2i, 2i + 1)`` (torchscale ``XPOS``, rotary-embedding-torch), ``"half"`` pairs
    ``(i, i + r/2)``. Peers' centres: rotary-embedding-torch ``seq_len // 2``; torchscale
    ``(length + offset + 1) // 2``. Phases come from exact positions; the scale factor is
    ``exp((n - centre) / scale_base * log zeta_i)`` in float32 (float64 for float64 ``x``).
    It leaves the range of x's dtype for ``|n - centre| / scale_base`` beyond ~70 in float32
    and bfloat16 (~8 in float16, ~566 in float64): a ParameterError in eager mode.
    """
    xp = array_api.namespace(x=x, positions=positions)
    params.choice("kind", kind, KINDS)
    params.choice("layout", layout, rotation.LAYOUTS)
    base = params.base(base)
    scale_base = params.positive("scale_base", scale_base)
    centre = _finite("centre", centre)
    device, positions = rotation.array_inputs(xp, x, positions)
    seq, dim = rotation.check_shapes(x, positions)
    rd = rotation.rotary_width(dim, rotary_dim)
    compute = array_api.compute_dtype(xp, x.dtype)
    if positions is None:
        positions = xp.arange(seq, device=device) if device is not None else xp.arange(seq)
        span = (0, seq - 1) if seq else None
    else:
        array_api.check_positions_dtype(xp, positions)
        span = array_api.check_position_range(xp, positions, compute=compute)
    if span is not None:
        _check_scale_range(xp, span, centre, scale_base, x.dtype)

    p = xp.astype(positions, compute)[..., None]  # [seq, 1] or [batch, seq, 1]
    inv_freq = [base ** (-2.0 * i / rd) for i in range(rd // 2)]
    angles = rotation.phases(xp, p, inv_freq, compute=compute, device=device)
    sign = 1.0 if kind == "query" else -1.0
    log_zeta = array_api.asarray(xp, [sign * math.log(z) for z in zeta(rd)], dtype=compute,
                           device=device)
    # (n - c) / scale_base first: 0 / tiny scale_base stays 0 (factor 1), not 0 * inf
    factor = xp.exp(((p - centre) / scale_base) * log_zeta)
    if positions.ndim == 2:  # line batch up with x[b, ..., s, :]
        shape = (int(angles.shape[0]), *([1] * (x.ndim - 3)), seq, rd // 2)
        angles, factor = xp.reshape(angles, shape), xp.reshape(factor, shape)
    cos, sin = xp.cos(angles) * factor, xp.sin(angles) * factor

    head = xp.astype(x[..., :rd], compute, copy=False)
    rotated = xp.astype(rotation.rotate(xp, head, cos, sin, layout), x.dtype, copy=False)
    if rd == dim:
        return rotated
    return xp.concat([rotated, x[..., rd:]], axis=-1)


LAYERS = (Layer(
    "XPosEmbedding", "xpos", config=("kind", "scale_base", "centre", "base", "layout",
                                     "rotary_dim"),
    doc="xPos: layer(x, positions=None) -> x rotated and scaled"),)
