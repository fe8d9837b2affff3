"""Liger-Kernel's fused rotary (Triton, CUDA) as a posenc backend: ``--backend peer:liger``.

``liger_kernel.transformers.rope.liger_rotary_pos_emb(q, k, cos, sin)`` replaces transformers'
``apply_rotary_pos_emb`` (half layout, whole head): cos/sin come from transformers'
``LlamaRotaryEmbedding`` exactly as in a patched Llama.
"""

from __future__ import annotations

from typing import Any

from ..torch import BACKEND as TORCH
from . import transformers as hf
from ._common import as_bhsd, peer_backend, require


def rope(x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
         rotary_dim: int | None = None, scaling: dict[str, Any] | None = None,
         seq_len: int | None = None) -> Any:
    import torch
    from liger_kernel.transformers.rope import liger_rotary_pos_emb
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    require(layout == "half", "Liger's rotary pairs (i, i + d/2) only")
    require(rotary_dim is None and "partial_rotary_factor" not in (scaling or {}),
            "Liger's rotary rotates the whole head")
    require(x.device.type == "cuda", "Liger's kernels run on CUDA only")
    shape, pos = as_bhsd(tuple(x.shape), None if positions is None else positions.cpu().numpy())
    rotary = LlamaRotaryEmbedding(hf._config(x.shape[-1], scaling, base, "Llama")).to(x.device)
    x4 = x.reshape(shape).contiguous()
    with torch.no_grad():
        cos, sin = rotary(x4, torch.from_numpy(pos).to(x.device))
        q, _ = liger_rotary_pos_emb(x4, x4.clone(), cos, sin)
    return q.reshape(x.shape)


BACKEND = peer_backend(
    TORCH, "peer:liger", packages={"torch": "torch", "transformers": "transformers",
                                   "liger_kernel": "liger-kernel"},
    version_of=("liger-kernel", "transformers", "torch"),
    dtypes=("float32", "bfloat16", "float16"), overrides={"rope": rope})
