"""diffusers as a posenc backend: ``--backend peer:diffusers``.

- rope: ``get_1d_rotary_pos_embed(r, positions, theta=base, use_real=True, linear_factor,
  repeat_interleave_real=interleaved, freqs_dtype=float64)`` (FLUX's float64 frequencies)
  and ``apply_rotary_emb(x, (cos, sin), use_real_unbind_dim=-1 interleaved / -2 half)`` on
  the first r features, one positions row at a time;
- axial_rope: FLUX's ``FluxPosEmbed(theta, axes_dim)`` on the grid ids and
  ``apply_rotary_emb`` (interleaved: each axis owns a contiguous block);
- sinusoidal: ``get_1d_sincos_pos_embed_from_grid`` (concat layout, base 10000, float64).

``get_1d_rotary_pos_embed`` returns float32 cos/sin and ``apply_rotary_emb`` rotates
``x.float()``: float64 rope is out of scope.
"""

from __future__ import annotations

from typing import Any

from ..torch import BACKEND as TORCH
from ._common import linear_factor, peer_backend, require, rotary_dim_of

FLOAT32_ROTATION = "diffusers' apply_rotary_emb rotates x.float() with float32 cos/sin"


def _apply(x: Any, rows: Any, freqs: Any, interleaved: bool) -> Any:
    """``apply_rotary_emb`` on x [..., seq, d] with the (cos, sin) of each positions row
    (rows [batch, seq, ...] apply to x[b, ..., s, :]; one row to all of x)."""
    import torch
    from diffusers.models.embeddings import apply_rotary_emb

    require(x.dtype != torch.float64, FLOAT32_ROTATION)
    x4 = x.reshape(rows.shape[0], -1, *x.shape[-2:])  # [batch, heads, seq, d]
    out = [apply_rotary_emb(x4[b:b + 1], freqs(row), use_real=True,
                            use_real_unbind_dim=-1 if interleaved else -2, sequence_dim=2)
           for b, row in enumerate(rows)]
    return torch.cat(out).reshape(x.shape)


def rope(x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
         rotary_dim: int | None = None, scaling: dict[str, Any] | None = None,
         seq_len: int | None = None) -> Any:
    import torch
    from diffusers.models.embeddings import get_1d_rotary_pos_embed

    factor = linear_factor(scaling, "get_1d_rotary_pos_embed has a linear_factor only")
    r = rotary_dim_of(x.shape[-1], rotary_dim, scaling)
    rows = torch.arange(x.shape[-2], device=x.device)[None] if positions is None else (
        positions[None] if positions.ndim == 1 else positions)

    def freqs(row: Any) -> Any:
        return get_1d_rotary_pos_embed(r, row, theta=base, use_real=True, linear_factor=factor,
                                       repeat_interleave_real=layout == "interleaved",
                                       freqs_dtype=torch.float64)

    rotated = _apply(x[..., :r], rows, freqs, layout == "interleaved")
    return torch.cat([rotated, x[..., r:]], dim=-1)


def axial_rope(x: Any, positions: Any, *, axes_dims: Any = None, base: float = 10000.0,
               layout: str = "half") -> Any:
    import torch
    from diffusers.models.transformers.transformer_flux import FluxPosEmbed

    require(layout == "interleaved", "FLUX's rope pairs (2j, 2j + 1) in each axis's block")
    n_axes = positions.shape[-1]
    dims = list(axes_dims) if axes_dims is not None else [x.shape[-1] // n_axes] * n_axes
    require(all(d % 2 == 0 and d > 0 for d in dims), "FLUX's axes widths are even")
    r = sum(dims)
    embed = FluxPosEmbed(theta=base, axes_dim=dims)
    rows = positions[None] if positions.ndim == 2 else positions
    rotated = _apply(x[..., :r], rows, embed, True)
    return torch.cat([rotated, x[..., r:]], dim=-1)


def sinusoidal(positions: Any, dim: int, *, base: float = 10000.0, layout: str = "interleaved",
               padding_idx: int | None = None, dtype: Any = None, device: Any = None) -> Any:
    import torch
    from diffusers.models.embeddings import get_1d_sincos_pos_embed_from_grid

    require(layout == "concat", "get_1d_sincos_pos_embed_from_grid is the concat layout")
    require(base == 10000.0, "get_1d_sincos_pos_embed_from_grid's base is fixed at 10000")
    require(dim % 2 == 0, "get_1d_sincos_pos_embed_from_grid takes an even embed_dim")
    require(padding_idx is None, "get_1d_sincos_pos_embed_from_grid has no padding row")
    out = get_1d_sincos_pos_embed_from_grid(dim, positions.to(torch.float64))
    return out.reshape(*positions.shape, dim).to(device=device or positions.device,
                                                 dtype=dtype or torch.float32)


BACKEND = peer_backend(
    TORCH, "peer:diffusers", packages={"torch": "torch", "diffusers": "diffusers"},
    version_of=("diffusers", "torch"), dtypes=("float64", "float32", "bfloat16", "float16"),
    overrides={"rope": rope, "axial_rope": axial_rope, "sinusoidal": sinusoidal})
