"""flash-attn's rotary kernel as a posenc backend (CUDA): ``--backend peer:flash-attn``.

``flash_attn.layers.rotary.apply_rotary_emb(x, cos, sin, interleaved=...)`` on x
[batch, seq, heads, dim], with cos/sin [seq, rotary_dim / 2] built by the adapter in float32
from exact positions (as flash-attn's ``RotaryEmbedding`` caches them). One positions row for
the batch (the kernel's ``seqlen_offsets`` cover contiguous positions only); no scaling.
"""

from __future__ import annotations

from typing import Any

from ..torch import BACKEND as TORCH
from ._common import peer_backend, require, rotary_dim_of


def rope(x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
         rotary_dim: int | None = None, scaling: dict[str, Any] | None = None,
         seq_len: int | None = None) -> Any:
    import torch
    from flash_attn.layers.rotary import apply_rotary_emb

    require(scaling is None, "flash-attn's rotary takes cos/sin; no scaling schedules")
    require(x.device.type == "cuda", "flash-attn's rotary kernel runs on CUDA only")
    require(positions is None or positions.ndim == 1, "one positions row for the batch only")
    seq, dim = x.shape[-2:]
    r = rotary_dim_of(dim, rotary_dim, None)
    pos = torch.arange(seq, device=x.device) if positions is None else positions
    theta = base ** (-torch.arange(0, r, 2, device=x.device, dtype=torch.float64) / r)
    angles = pos.to(torch.float64)[:, None] * theta[None, :]
    cos, sin = angles.cos().to(torch.float32), angles.sin().to(torch.float32)
    x4 = x.reshape(-1, 1, seq, dim).transpose(1, 2)  # [batch, seq, 1, dim]
    out = apply_rotary_emb(x4, cos.to(x.dtype), sin.to(x.dtype),
                           interleaved=layout == "interleaved")
    return out.transpose(1, 2).reshape(x.shape)


BACKEND = peer_backend(
    TORCH, "peer:flash-attn", packages={"torch": "torch", "flash_attn": "flash-attn"},
    version_of=("flash-attn", "torch"), dtypes=("float32", "bfloat16", "float16"),
    overrides={"rope": rope})
