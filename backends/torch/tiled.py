"""Cache-sized tiles for the eager rotation on CPU: q and k rotated block of positions by block.

A rotation by out= and in-place ops passes over its data five times (a product, an addcmul,
per half). Over a whole prefill (tens of MB) every pass goes to DRAM; over a tile of a few MB
(every head, a block of positions) the passes after the first hit the cache, and the call
moves little more than a copy does. A tile holds ``TILE_ELEMENTS`` elements, so a call makes
``size / TILE_ELEMENTS`` tiles: a decode step is one tile, a prefill of q ``[1, 32, 4096, 128]``
sixteen. The loop is over cache-sized blocks, never over single positions.

16-bit inputs are rotated in float32 (like ``posenc.rope``): each tile is widened once, rotated
into a float32 scratch tile and narrowed into its target, the same roundings as the
array-API path's float32 arithmetic then one cast.
"""

from __future__ import annotations

from typing import Any

import torch

from .native import rotate_into

__all__ = ["TILE_ELEMENTS", "rotate_tiled"]

TILE_ELEMENTS = 1 << 20  # 4 MiB of float32: past the L2 of one core, well inside the L3


def rotate_tiled(x: torch.Tensor, target: torch.Tensor, cos: Any, sin: Any, rd: int,
                 layout: str) -> None:
    """``target[..., :rd]`` = ``x`` rotated by the half-width float32 ``cos``/``sin`` (axis -2
    the positions, lined up with x's), the rest copied; ``target`` may be ``x`` itself.

    Eager, no autograd (out= ops; the caller checks :func:`native.out_ops_allowed`)."""
    seq = int(x.shape[-2])
    per_position = max(1, x.numel() // max(seq, 1))
    # other devices: one tile (their caches do not hold a pass's worth; launches cost more)
    block = max(1, TILE_ELEMENTS // per_position) if x.device.type == "cpu" else max(seq, 1)
    wide = x.dtype != cos.dtype
    scratch = None
    for start in range(0, seq, block):
        stop = min(seq, start + block)
        if block >= seq:  # one tile: no slicing (a decode step dispatches less)
            xt, tt, c, s = x, target, cos, sin
        else:
            xt, tt = x[..., start:stop, :], target[..., start:stop, :]
            c, s = _rows(cos, start, stop), _rows(sin, start, stop)
        if not wide:
            rotate_into(xt, tt, c, s, rd, layout)
            continue
        if scratch is None:
            scratch = torch.empty((*x.shape[:-2], block, rd), dtype=cos.dtype, device=x.device)
        work = scratch[..., : stop - start, :]
        rotate_into(xt[..., :rd].to(cos.dtype), work, c, s, rd, layout)
        tt[..., :rd].copy_(work)
        if rd < x.shape[-1] and target is not x:
            tt[..., rd:].copy_(xt[..., rd:])


def _rows(table: Any, start: int, stop: int) -> Any:
    """Rows ``[start, stop)`` of a table lined up with x (one row broadcasts to all)."""
    return table if table.shape[-2] == 1 else table[..., start:stop, :]
