"""rotary-embedding-torch (lucidrains) as a posenc backend: ``--backend peer:rotary-embedding-torch``.

rope, interleaved layout: ``RotaryEmbedding(dim=rotary_dim, theta=base, interpolate_factor=f)``
and its own ``rotate_queries_or_keys(x, offset=...)`` for contiguous positions (how a model
calls it, KV-cache decoding included); other positions go through ``forward(positions)`` and
``apply_rotary_emb``, one batch row at a time. The half layout runs as the interleaved one on
permuted features (pairs (i, i + r/2) moved next to each other and back: exact, as a port of
a half-layout checkpoint onto it does). It computes its frequencies in float32, so
float64 is out of scope; linear interpolation is the only scaling it has. A 2-wide rotary is
scoped out where its constructor divides by zero (its own crash, in docs/known-issues.md),
so its row shows its other verdicts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..torch import BACKEND as TORCH
from ._common import linear_factor, peer_backend, require, rotary_dim_of


def rope(x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
         rotary_dim: int | None = None, scaling: dict[str, Any] | None = None,
         seq_len: int | None = None) -> Any:
    import torch
    from rotary_embedding_torch import RotaryEmbedding, apply_rotary_emb

    require(x.dtype != torch.float64, "rotary-embedding-torch's frequencies are float32")
    factor = linear_factor(scaling, "rotary-embedding-torch has linear interpolation only")
    r = rotary_dim_of(x.shape[-1], rotary_dim, scaling)
    if layout == "half":  # features (i, i + r/2) -> (2i, 2i + 1), rotated, and back
        pairs = torch.stack([torch.arange(r // 2), torch.arange(r // 2) + r // 2], -1).flatten()
        order = torch.cat([pairs, torch.arange(r, x.shape[-1])]).to(x.device)
        out = rope(x[..., order], positions, base=base, layout="interleaved", rotary_dim=r,
                   scaling=scaling)
        return out[..., torch.argsort(order)]
    try:
        rotary = RotaryEmbedding(dim=r, theta=base, interpolate_factor=factor).to(x.device)
    except ZeroDivisionError:  # its own crash, reported upstream: scoped so its row shows the rest
        require(r != 2, "rotary-embedding-torch's RotaryEmbedding(dim=2) divides by zero "
                "(theta_rescale_factor ** (dim / (dim - 2)); docs/known-issues.md)")
        raise
    pos = None if positions is None else positions.cpu().numpy()
    with torch.no_grad():
        if pos is None or (pos.ndim == 1 and pos.size and np.all(np.diff(pos) == 1)):
            offset = 0 if pos is None else int(pos[0])
            require(offset >= 0, "rotary-embedding-torch's offset counts cached tokens: below 0 "
                    "its frequency cache is read by Python's negative slicing (empty, or rows "
                    "from the cache's end)")
            return rotary.rotate_queries_or_keys(x, seq_dim=-2, offset=offset)
        rows = pos if pos.ndim == 2 else pos[None]
        out = [apply_rotary_emb(rotary(torch.from_numpy(row).to(x.device, torch.float32)
                                       / factor), x[b] if pos.ndim == 2 else x)
               for b, row in enumerate(rows)]
        return torch.stack(out) if pos.ndim == 2 else out[0]


BACKEND = peer_backend(
    TORCH, "peer:rotary-embedding-torch",
    packages={"torch": "torch", "rotary_embedding_torch": "rotary-embedding-torch"},
    version_of=("rotary-embedding-torch", "torch"),
    dtypes=("float64", "float32", "bfloat16", "float16"), overrides={"rope": rope},
    notes={"*/float16/*/rope/case:near_2_17": "positions built in the dtype of x "
           "(get_seq_pos): float16 positions past 65504 are inf, the rotation NaN"})
