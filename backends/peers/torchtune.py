"""torchtune as a posenc backend: ``--backend peer:torchtune``.

rope: ``RotaryPositionalEmbeddings(dim, max_seq_len, base)`` and, for Llama 3.1's schedule,
``Llama3ScaledRoPE(dim, max_seq_len, base, scale_factor, low_freq_factor, high_freq_factor,
old_context_len)``, called on x ``[b, s, n_h, h_d]`` with ``input_pos`` ``[b, s]`` as a model
does; the cache covers positions 0..max(positions). Both rotate the whole head with pairs
(2i, 2i + 1); the half layout runs on permuted features (exact, see ``via_interleaved``).
Angles and the rotation are float32 (x is cast up and back).
"""

from __future__ import annotations

from typing import Any

from ..torch import BACKEND as TORCH
from ._common import as_bhsd, cache_rows, peer_backend, require, rotary_dim_of, via_interleaved

LLAMA3 = {"factor": "scale_factor", "low_freq_factor": "low_freq_factor",
          "high_freq_factor": "high_freq_factor",
          "original_max_position_embeddings": "old_context_len"}


def _module(dim: int, rows: int, base: float, scaling: dict[str, Any] | None) -> Any:
    if scaling is None:
        from torchtune.modules import RotaryPositionalEmbeddings

        return RotaryPositionalEmbeddings(dim, max_seq_len=rows, base=base)
    from torchtune.models.llama3_1 import Llama3ScaledRoPE

    kind = scaling.get("rope_type", scaling.get("type"))
    params = {k: v for k, v in scaling.items() if k not in ("rope_type", "type", "rope_theta",
                                                              "max_position_embeddings")}
    require(kind == "llama3" and set(params) <= set(LLAMA3), "torchtune has Llama 3.1's "
            f"scaled rope only (Llama3ScaledRoPE), not {kind!r} with {sorted(params)}")
    return Llama3ScaledRoPE(dim, max_seq_len=rows, base=scaling.get("rope_theta", base),
                            **{LLAMA3[k]: v for k, v in params.items()})


def rope(x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
         rotary_dim: int | None = None, scaling: dict[str, Any] | None = None,
         seq_len: int | None = None) -> Any:
    import torch

    require(x.dtype != torch.float64, "torchtune computes angles and the rotation in float32")
    dim = x.shape[-1]
    require(rotary_dim_of(dim, rotary_dim, scaling) == dim, "torchtune rotates the whole head")
    if layout == "half":
        return via_interleaved(x, dim, lambda y: rope(y, positions, base=base,
                                                      layout="interleaved", scaling=scaling))
    shape, pos = as_bhsd(tuple(x.shape), None if positions is None else positions.cpu().numpy())
    module = _module(dim, cache_rows(pos, dim, "torchtune"), base, scaling).to(x.device)
    x4 = x.reshape(shape).transpose(1, 2)  # [b, s, n_h, h_d]
    with torch.no_grad():
        out = module(x4, input_pos=torch.from_numpy(pos).to(x.device))
    return out.transpose(1, 2).reshape(x.shape)


BACKEND = peer_backend(
    TORCH, "peer:torchtune", packages={"torch": "torch", "torchtune": "torchtune"},
    version_of=("torchtune", "torch"), dtypes=("float64", "float32", "bfloat16", "float16"),
    overrides={"rope": rope})
