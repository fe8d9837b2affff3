"""``pe.RotaryEmbedding`` on CUDA through the fused Triton kernel (``posenc.backends.torch_triton``):
q and k in one launch (GQA included), in place, into ``out=`` or into new tensors, and under
torch.compile as the ``posenc::rotary`` custom op. On CPU only under Triton's interpreter
(``TRITON_INTERPRET=1``), which is how the route is tested without a GPU."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import torch

__all__ = ["kernel_rotation"]


def _kernel_device(q: torch.Tensor) -> bool:
    if q.device.type == "cuda":
        return _triton_installed()
    interpreting = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    return q.device.type == "cpu" and interpreting and _triton_installed()


_TRITON: list[bool] = []


def _triton_installed() -> bool:
    if not _TRITON:
        _TRITON.append(importlib.util.find_spec("triton") is not None)
    return _TRITON[0]


def kernel_rotation(q: torch.Tensor, k: torch.Tensor | None, positions: Any,
                    config: dict[str, Any], outs: Any, direct: bool, inplace: bool) -> Any:
    """The module's result by the kernel, or None where the kernel does not apply (not CUDA,
    no Triton, float64). ``outs``/``direct`` as ``RotaryEmbedding._outputs`` gives them:
    targets that overlap another tensor get the result made first, then copied."""
    if not _kernel_device(q):
        return None
    from . import triton_rope

    launch = triton_rope.prepared(q, positions, k=k, **config)
    if launch is None:
        return None
    if outs is not None and direct:
        if inplace:
            return launch(q, k, inplace=True)
        return launch(q, k, out=outs)
    result = launch(q, k)
    if outs is None:
        return result
    for target, value in zip(outs, (result,) if k is None else result, strict=True):
        target.copy_(value)
    return outs[0] if k is None else outs
