"""gpt-oss (OpenAI's reference PyTorch implementation) as a posenc backend:
``--backend peer:gpt-oss``.

rope: ``gpt_oss.torch.model.RotaryEmbedding(head_dim, base, dtype, initial_context_length,
scaling_factor, ntk_alpha, ntk_beta)``, whose ``_compute_cos_sin`` builds float32 cos/sin for
positions 0..max(positions) (YaRN from ``_compute_concentration_and_inv_freq``: NTK-by-parts
between ``ntk_beta`` (beta_fast) and ``ntk_alpha`` (beta_slow) rotations over the initial
context, never floored or ceiled: transformers' ``truncate: False``, with the concentration
0.1·ln(factor) + 1 multiplied into cos and sin), rows picked by position, then
``_apply_rotary_emb`` (half layout: ``torch.chunk(x, 2)``) on x ``[tokens, heads, head_dim]`` as
``RotaryEmbedding.forward`` does, in the dtype under test. It rotates the whole head in the half
layout only, and has no other schedule than YaRN.
"""

from __future__ import annotations

import math
from typing import Any

from ..torch import BACKEND as TORCH
from ._common import as_bhsd, cache_rows, peer_backend, require, rotary_dim_of

# posenc's yarn keys -> RotaryEmbedding's arguments
YARN = {"factor": "scaling_factor", "beta_fast": "ntk_beta", "beta_slow": "ntk_alpha",
        "original_max_position_embeddings": "initial_context_length"}


def _arguments(dim: int, base: float, scaling: dict[str, Any] | None) -> dict[str, Any]:
    """RotaryEmbedding's keyword arguments for ``scaling`` (none: no scaling)."""
    if scaling is None:
        return {"base": base}
    kind = scaling.get("rope_type", scaling.get("type"))
    params = {k: v for k, v in scaling.items() if k not in ("rope_type", "type", "rope_theta",
                                                              "max_position_embeddings")}
    require(kind == "yarn" and params.get("truncate") is False
            and set(params) <= {*YARN, "truncate"} and "factor" in params,
            "gpt-oss's RotaryEmbedding has YaRN only, with an explicit factor, truncate: False "
            f"and no mscale or attention_factor, not {kind!r} with {sorted(params)}")
    args = {"base": scaling.get("rope_theta") or base, "ntk_beta": 32.0, "ntk_alpha": 1.0,
            **{YARN[k]: float(v) for k, v in params.items() if k in YARN}}
    require(args["scaling_factor"] >= 1.0, "gpt-oss applies YaRN only for a factor over 1")
    if args["scaling_factor"] > 1.0:  # its `assert 0 < low < high < d_half - 1`
        length, theta = args.get("initial_context_length", 4096), args["base"]
        low, high = (dim / 2 * math.log(length / (beta * 2 * math.pi)) / math.log(theta)
                     for beta in (args["ntk_beta"], args["ntk_alpha"]))
        require(0 < low < high < dim / 2 - 1, "gpt-oss asserts 0 < low < high < head_dim/2 - 1 "
                f"for YaRN's correction dims (here {low:.3g}, {high:.3g})")
    return args


def rope(x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
         rotary_dim: int | None = None, scaling: dict[str, Any] | None = None,
         seq_len: int | None = None) -> Any:
    import torch
    from gpt_oss.torch.model import RotaryEmbedding, _apply_rotary_emb

    require(x.dtype != torch.float64, "gpt-oss computes its cos/sin in float32")
    require(layout == "half", "gpt-oss's _apply_rotary_emb pairs (i, i + d/2) only")
    dim = x.shape[-1]
    require(rotary_dim_of(dim, rotary_dim, scaling) == dim, "gpt-oss rotates the whole head")
    module = RotaryEmbedding(dim, dtype=torch.float32, device=x.device,
                             **_arguments(dim, base, scaling))
    shape, pos = as_bhsd(tuple(x.shape), None if positions is None else positions.cpu().numpy())
    cos, sin = module._compute_cos_sin(cache_rows(pos, dim, "gpt-oss"))
    index = torch.from_numpy(pos).to(x.device)
    x4 = x.reshape(shape).transpose(1, 2)  # [b, s, heads, head_dim]: tokens, heads, head_dim
    out = _apply_rotary_emb(x4, cos[index], sin[index])  # cos [b, s, d/2] -> [b, s, 1, d/2]
    return out.transpose(1, 2).reshape(x.shape)


BACKEND = peer_backend(
    TORCH, "peer:gpt-oss", packages={"torch": "torch", "safetensors": "safetensors",
                                     "gpt_oss": "gpt-oss"},
    version_of=("gpt-oss", "torch"), dtypes=("float64", "float32", "bfloat16", "float16"),
    overrides={"rope": rope})
