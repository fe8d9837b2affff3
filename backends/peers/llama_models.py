"""llama-models (Meta's reference code) as a posenc backend: ``--backend peer:llama-models``.

rope: ``llama_models.llama3.model.precompute_freqs_cis(dim, end, theta, use_scaled)`` (complex64
rows for positions 0..max(positions); ``use_scaled`` is Llama 3.1's ``apply_scaling``, whose
constants are fixed: factor 8, low_freq_factor 1, high_freq_factor 4, old_context_len 8192),
rows picked by position, then ``apply_rotary_emb(xq, xk, freqs_cis)`` (complex multiplication:
pairs (2i, 2i + 1)) on x ``[batch, seq, heads, head_dim]``, one batch row at a time since its
``reshape_for_broadcast`` takes one row of freqs_cis per sequence position. It rotates the
whole head in float32 (x cast up and back); the half layout runs on permuted features (exact,
see ``via_interleaved``).
"""

from __future__ import annotations

from typing import Any

from ..torch import BACKEND as TORCH
from ._common import as_bhsd, cache_rows, peer_backend, require, rotary_dim_of, via_interleaved

# apply_scaling's constants: the only Llama 3.1 schedule it computes
LLAMA3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}


def _scaled(scaling: dict[str, Any] | None, base: float) -> tuple[bool, float]:
    """precompute_freqs_cis's ``use_scaled`` and ``theta`` for ``scaling``."""
    if scaling is None:
        return False, base
    kind = scaling.get("rope_type", scaling.get("type"))
    params = {k: v for k, v in scaling.items() if k not in ("rope_type", "type", "rope_theta",
                                                              "max_position_embeddings")}
    require(kind == "llama3" and params == LLAMA3, "llama-models' apply_scaling is Llama 3.1's "
            f"with fixed constants {LLAMA3}, not {kind!r} with {params}")
    return True, scaling.get("rope_theta") or base


def rope(x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
         rotary_dim: int | None = None, scaling: dict[str, Any] | None = None,
         seq_len: int | None = None) -> Any:
    import torch
    from llama_models.llama3.model import apply_rotary_emb, precompute_freqs_cis

    require(x.dtype != torch.float64, "llama-models computes angles and the rotation in "
            "float32 (complex64)")
    dim = x.shape[-1]
    require(rotary_dim_of(dim, rotary_dim, scaling) == dim, "llama-models rotates the whole "
            "head")
    if layout == "half":
        return via_interleaved(x, dim, lambda y: rope(y, positions, base=base,
                                                      layout="interleaved", scaling=scaling))
    use_scaled, theta = _scaled(scaling, base)
    shape, pos = as_bhsd(tuple(x.shape), None if positions is None else positions.cpu().numpy())
    freqs_cis = precompute_freqs_cis(dim, cache_rows(pos, dim, "llama-models"), theta=theta,
                                     use_scaled=use_scaled).to(x.device)
    x4 = x.reshape(shape).transpose(1, 2)  # [b, s, heads, head_dim]
    rows = [apply_rotary_emb(x4[b:b + 1], x4[b:b + 1], freqs_cis[torch.from_numpy(pos[b])])[0]
            for b in range(shape[0])]
    return torch.cat(rows).transpose(1, 2).reshape(x.shape)


BACKEND = peer_backend(
    TORCH, "peer:llama-models", packages={"torch": "torch", "fairscale": "fairscale",
                                          "llama_models": "llama-models"},
    version_of=("llama-models", "torch"), dtypes=("float64", "float32", "bfloat16", "float16"),
    overrides={"rope": rope})
