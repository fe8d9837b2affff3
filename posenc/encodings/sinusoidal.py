"""Sinusoidal table: layouts ``interleaved`` (paper), ``concat`` (Marian/BART) and ``t2t``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import array_api, params
from ..errors import ParameterError
from ..layers import Layer

__all__ = ["sinusoidal"]

LAYOUTS = ("interleaved", "concat", "t2t")


def frequencies(dim: int, base: float, layout: str) -> np.ndarray:
    """Angular frequencies in float64 (host side: they depend only on static parameters)."""
    if layout == "t2t":
        half = dim // 2
        return np.exp(-np.arange(half) * (math.log(base) / max(half - 1, 1)))
    return base ** (-2.0 * np.arange((dim + 1) // 2) / dim)


def sinusoidal(
    positions: Any, dim: int, *, base: float = 10000.0, layout: str = "interleaved",
    padding_idx: int | None = None, dtype: Any = None, device: Any = None,
) -> Any:
    """Sinusoidal position table ``[*positions.shape, dim]``.

    ``positions`` are integers (or float32/float64). ``layout``: ``interleaved`` gives
    ``[sin a0, cos a0, sin a1, …]`` (odd ``dim``: last column a sin), ``concat`` gives
    ``[sin … | cos …]`` (odd: the sin half is longer), ``t2t`` uses tensor2tensor/fairseq
    frequencies ``base^(-i/(dim//2 - 1))`` with ``[sin | cos]`` (odd: a trailing zero column).
    Rows where ``positions == padding_idx`` are zero (fairseq). ``dtype`` defaults to float32;
    angles are computed in float64 for float64 output and float32 otherwise.
    """
    xp = array_api.namespace(positions=positions)
    dim = params.width("dim", dim)
    base = params.base(base)
    params.choice("layout", layout, LAYOUTS)
    if layout == "t2t" and dim < 2:
        raise ParameterError(f"dim={dim} must be >= 2 for layout='t2t'")
    if padding_idx is not None:
        padding_idx = params.size("padding_idx", padding_idx, minimum=-(2**31))
    if not hasattr(positions, "dtype"):
        positions = array_api.asarray(xp, positions, device=device)
    array_api.check_positions_dtype(xp, positions)
    out_dtype = array_api.output_dtype(xp, dtype, of="positions")
    compute = array_api.compute_dtype(xp, out_dtype)
    array_api.assert_position_range(xp, positions, compute=compute)

    dev = array_api.device_of(positions)
    freqs = array_api.asarray(xp, frequencies(dim, base, layout), dtype=compute, device=dev)
    angles = xp.astype(positions, compute)[..., None] * freqs
    sin, cos = xp.sin(angles), xp.cos(angles)
    if layout == "interleaved":
        pairs = xp.stack([sin, cos], axis=-1)
        table = xp.reshape(pairs, (*tuple(positions.shape), 2 * freqs.shape[0]))[..., :dim]
    elif layout == "concat":
        table = xp.concat([sin, cos[..., : dim // 2]], axis=-1)
    else:
        parts = [sin, cos]
        if dim % 2:
            parts.append(xp.zeros_like(sin[..., :1]))
        table = xp.concat(parts, axis=-1)
    if padding_idx is not None:
        keep = xp.astype(positions != padding_idx, compute)[..., None]
        table = table * keep
    return xp.astype(table, out_dtype, copy=False)


LAYERS = (Layer(
    "SinusoidalPositionEmbedding", "sinusoidal", config=("dim", "base", "layout", "padding_idx"),
    doc="The fixed sinusoidal table: layer(positions) -> [..., dim]"),)
