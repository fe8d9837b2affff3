"""Pixtral's 2-D rope: one frequency ladder over the head, even rungs to the row and odd rungs
to the column, paired as rotate_half (transformers) or as complex pairs (mistral-inference)."""

from __future__ import annotations

from typing import Any

from .. import array_api, params, validation
from ..errors import ParameterError
from ..rotary import rotation, vision

__all__ = ["pixtral_rope"]


def _positions_shape(fields: dict[str, Any]) -> str:
    if len(fields["shape"]) == 1:  # flat ids [seq]
        return f"positions has shape {fields['shape']} but x has {fields['first_size']} tokens"
    return vision.GRID_SHAPE.format(**{**fields, "expected": f"[{fields['size_of']['seq']}, 2]"})


_INPUTS = validation.Inputs("pixtral_rope", messages={"shape:positions": _positions_shape})


def pixtral_frequencies(dim: int, base: float) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """``inv_freq`` (``[θ_0, θ_2, ..., θ_1, θ_3, ...]``, θ_k = base^(-2k/dim)) and the axis
    (0 = row, 1 = column) of each."""
    ladder = [base ** (-2.0 * k / dim) for k in range(dim // 2)]
    return tuple(ladder[0::2] + ladder[1::2]), (0,) * (dim // 4) + (1,) * (dim // 4)


def pixtral_rope(x: Any, positions: Any, *, base: float = 10000.0,
                 max_width: int | None = None, layout: str = "half") -> Any:
    """Rotate ``x`` (``[..., seq, dim]``, dim a multiple of 4) by patch coordinates.

    ``positions``: ``[seq, 2]`` (row, column), or flat ids ``row·max_width + column``
    (``[seq]``, transformers < 5 and mistral-inference) with ``max_width`` the model's
    ``max_patches_per_side`` (image_size // patch_size), not the image's own width. The
    ladder θ_k = base^(-2k/dim), k < dim/2: rows take θ_0, θ_2, ..., columns θ_1, θ_3, ...;
    the row's frequencies first. ``layout="half"`` pairs feature j with j + dim/2
    (transformers' rotate_half), ``"interleaved"`` features (2j, 2j+1) (mistral-inference's
    complex pairs). Unlike :func:`axial_rope` with two halves, the column frequencies are
    base^(-(4i+2)/dim)."""
    xp = array_api.namespace(x=x, positions=positions)
    base = params.base(base)
    params.choice("layout", layout, rotation.LAYOUTS)
    device, positions = rotation.array_inputs(xp, x, positions)
    vision.require_grid(positions)
    _INPUTS.check(xp, x=x, positions=positions)
    dim = vision.head_width(x, "pixtral_rope")
    if positions.ndim == 1:
        if max_width is None:
            raise ParameterError("positions are flat ids [seq]: pass max_width (the model's "
                                 "max_patches_per_side) to split them into (row, column)")
        width = params.size("max_width", max_width, minimum=1)
        positions = xp.stack([xp.floor_divide(positions, width), xp.remainder(positions, width)],
                             axis=1)
    compute = array_api.compute_dtype(xp, x.dtype)
    array_api.assert_position_range(xp, positions, compute=compute)
    inv_freq, axis = pixtral_frequencies(dim, base)
    return vision.rotate_by_coordinates(xp, x, xp.astype(positions, compute), inv_freq, axis,
                                         layout, device)
