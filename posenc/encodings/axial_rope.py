"""Axial RoPE for grids (images, video): one section of rotary frequencies per grid axis, each
with its own frequency set and driven by that axis' coordinate."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import array_api, params, validation
from ..errors import ParameterError
from ..layers import Layer
from ..rotary import rotation

__all__ = ["axial_rope"]


def _axes_dims(value: Any, dim: int, n_axes: int) -> tuple[int, ...]:
    if value is None:
        if dim % (2 * n_axes):
            raise ParameterError(
                f"x.shape[-1]={dim} does not split into {n_axes} even per-axis widths "
                f"(positions have {n_axes} axes): pass axes_dims")
        return (dim // n_axes,) * n_axes
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise ParameterError(f"axes_dims={value!r} must be a list of {n_axes} even ints")
    if len(value) != n_axes:
        raise ParameterError(f"axes_dims={list(value)!r} has {len(value)} entries but positions "
                             f"have {n_axes} axes (positions.shape[-1])")
    for i, d in enumerate(value):
        if isinstance(d, bool) or not isinstance(d, int | np.integer):
            raise ParameterError(f"axes_dims={list(value)!r}: axes_dims[{i}]={d!r} is not an int")
        if d < 2 or d % 2:
            raise ParameterError(
                f"axes_dims={list(value)!r}: axes_dims[{i}]={d} must be even and >= 2")
    if sum(value) > dim:
        raise ParameterError(f"axes_dims={list(value)!r} sum to {sum(value)}, more than "
                             f"x.shape[-1]={dim}")
    return tuple(int(d) for d in value)


def axis_frequencies(axes_dims: Sequence[int],
                     base: float) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """``inv_freq`` (``r/2`` host floats: per axis ``base^(-2i/d_a)``, concatenated in axis
    order) and the axis of each frequency. Plain Python: torch.compile folds it into
    constants, where NumPy would be traced."""
    inv = tuple(base ** (-2.0 * i / d) for d in axes_dims for i in range(d // 2))
    axis = tuple(a for a, d in enumerate(axes_dims) for _ in range(d // 2))
    return inv, axis


def _bad_positions(pshape: tuple[int, ...], xshape: tuple[int, ...]) -> str:
    seq = xshape[-2]
    return (f"positions has shape {pshape} but x has shape {xshape}: positions must be "
            f"[seq, n_axes] = [{seq}, n_axes] or [batch, seq, n_axes] = [{xshape[0]}, {seq}, "
            "n_axes] grid coordinates (batched needs x.ndim >= 3)")


# positions may also be float32/float64 (array_api.check_positions_dtype)
_INPUTS = validation.Inputs("axial_rope", skip_kind=("positions",), messages={
    "shape:positions": lambda f: _bad_positions(f["shape"], f["shape_of"]["x"])})


def _check_shapes(xp: Any, x: Any, positions: Any) -> tuple[int, int, int]:
    _INPUTS.check(xp, x=x, positions=positions)
    # operator.index makes torch.compile specialise on dim and n_axes (plain int() turns
    # symbolic once a recompile has seen other sizes; the host-side frequencies need ints)
    seq, dim = int(x.shape[-2]), operator.index(x.shape[-1])
    n_axes = operator.index(positions.shape[-1])
    # n_axes >= 1, and batched ids take x's first dim as batch: rules the spec cannot say
    if n_axes < 1 or (positions.ndim == 3 and (x.ndim < 3 or positions.shape[0] != x.shape[0])):
        raise ParameterError(_bad_positions(tuple(positions.shape), tuple(x.shape)))
    return seq, dim, n_axes


def axial_rope(
    x: Any, positions: Any, *, axes_dims: Sequence[int] | None = None, base: float = 10000.0,
    layout: str = "half",
) -> Any:
    """Rotate ``x`` (``[..., seq, dim]``) by grid coordinates; same shape and dtype as ``x``.

    ``positions``: ``[seq, n_axes]`` or batched ``[batch, seq, n_axes]`` integer coordinates,
    e.g. (row, col) or (t, row, col); batched ones apply to ``x[b, ..., s, :]``.
    ``axes_dims``: rotated width ``d_a`` of each axis (even; default ``dim`` split evenly),
    summing to ``r <= dim``; features ``r..`` pass through unchanged. Axis ``a`` owns
    ``d_a/2`` consecutive frequencies ``base^(-2i/d_a)`` of the ``r/2`` (axes in order),
    driven by its coordinate. ``layout`` pairs frequency ``j`` with features
    ``(2j, 2j+1)`` (``"interleaved"``: FLUX, axis ``a`` owns a contiguous feature block) or
    ``(j, j + r/2)`` (``"half"``: transformers' Qwen2-VL vision rotary).
    """
    xp = array_api.namespace(x=x, positions=positions)
    params.choice("layout", layout, rotation.LAYOUTS)
    base = params.base(base)
    device, positions = rotation.array_inputs(xp, x, positions)
    if positions is None:
        raise ParameterError("positions=None: axial_rope needs [seq, n_axes] grid coordinates")
    seq, dim, n_axes = _check_shapes(xp, x, positions)
    dims = _axes_dims(axes_dims, dim, n_axes)
    inv_freq, axis = axis_frequencies(dims, base)
    rd, n = sum(dims), sum(dims) // 2
    if n == 0:
        raise ParameterError(f"x has shape {tuple(x.shape)} and axes_dims={list(dims)}: no pair "
                             "of features to rotate")
    compute = array_api.compute_dtype(xp, x.dtype)
    array_api.check_positions_dtype(xp, positions)
    array_api.assert_position_range(xp, positions, compute=compute)

    # P[..., s, j] = positions[..., s, axis[j]]: a gather, exact in any dtype
    index = array_api.asarray(xp, axis, device=device)  # the default index dtype (int32 in JAX x32)
    per_freq = xp.take(xp.astype(positions, compute), index, axis=positions.ndim - 1)
    angles = rotation.phases(xp, per_freq, inv_freq, compute=compute, device=device)
    if positions.ndim == 3:  # line batch up with x[b, ..., s, :]
        angles = xp.reshape(angles, (angles.shape[0], *([1] * (x.ndim - 3)), seq, n))
    cos, sin = xp.cos(angles), xp.sin(angles)

    head = xp.astype(x[..., :rd], compute, copy=False)
    rotated = xp.astype(rotation.rotate(xp, head, cos, sin, layout), x.dtype, copy=False)
    if rd == dim:
        return rotated
    return xp.concat([rotated, x[..., rd:]], axis=-1)


LAYERS = (Layer(
    "AxialRotaryEmbedding", "axial_rope", config=("axes_dims", "base", "layout"),
    doc="RoPE over a grid: layer(x, positions [..., seq, n_axes])"),)
