"""litgpt (Lightning AI) as a posenc backend: ``--backend peer:litgpt``.

rope: ``build_rope_cache(seq_len, n_elem=r, base, extra_config)`` with the ``extra_config`` its
``GPT.rope_cache`` passes for a config's ``rope_adjustments`` (linear ``factor``; Llama 3.1's
``low_freq_factor``/``high_freq_factor``; YaRN's ``beta_fast``/``beta_slow`` with ``mscale``
and ``mscale_all_dim``), rows picked by position as its ``batched_index_select`` does, then
``apply_rope`` (half layout) or ``apply_rope_interleave`` on the first r features (which
returns the rotated pairs de-interleaved, evens then odds, as transformers'
``apply_rotary_pos_emb_interleave`` for DeepSeek-V3 does: the adapter interleaves them back,
as the checkpoint's permuted weights do). The cache
is float32 and held in the dtype under test, as a model of that dtype holds its buffers.
"""

from __future__ import annotations

from typing import Any

from ..torch import BACKEND as TORCH
from ._common import as_bhsd, cache_rows, peer_backend, require, rotary_dim_of

YARN_NOTE = ("litgpt applies YaRN's attention factor only when mscale or mscale_all_dim is "
             "given (1.0 otherwise; YaRN and transformers: 0.1·ln(factor) + 1): "
             "docs/known-issues.md")
KEYS = {"linear": {"factor"},
        "llama3": {"factor", "low_freq_factor", "high_freq_factor",
                   "original_max_position_embeddings"},
        "yarn": {"factor", "beta_fast", "beta_slow", "original_max_position_embeddings",
                 "mscale", "mscale_all_dim"}}


def _extra(scaling: dict[str, Any] | None) -> tuple[dict[str, Any] | None, float | None]:
    """litgpt's extra_config for ``scaling``, and the scaling's own rope_theta."""
    if scaling is None:
        return None, None
    params = {k: v for k, v in scaling.items() if k not in ("rope_type", "type", "rope_theta",
                                                              "max_position_embeddings")}
    kind = scaling.get("rope_type", scaling.get("type"))
    require(kind in KEYS and set(params) <= KEYS[kind], f"litgpt's rope_adjustments have "
            f"linear, llama3 and yarn (without truncate) only, not {kind!r} with {sorted(params)}")
    if "original_max_position_embeddings" in params:
        params["original_max_seq_len"] = params.pop("original_max_position_embeddings")
    if kind == "yarn":
        params = {"beta_fast": 32.0, "beta_slow": 1.0, **params}
    return params, scaling.get("rope_theta")


def rope(x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
         rotary_dim: int | None = None, scaling: dict[str, Any] | None = None,
         seq_len: int | None = None) -> Any:
    import torch
    from litgpt.model import apply_rope, apply_rope_interleave, build_rope_cache

    require(x.dtype != torch.float64, "litgpt builds its cos/sin cache in float32")
    extra, theta = _extra(scaling)
    r = rotary_dim_of(x.shape[-1], rotary_dim, scaling)
    shape, pos = as_bhsd(tuple(x.shape), None if positions is None else positions.cpu().numpy())
    cos, sin = build_rope_cache(cache_rows(pos, r, "litgpt"), r, device=x.device,
                                base=theta or base, extra_config=extra)
    index = torch.from_numpy(pos).to(x.device)
    cos, sin = (t.to(x.dtype)[index] for t in (cos, sin))  # [batch, seq, r]
    x4 = x.reshape(shape)
    if layout == "half":
        rotated = apply_rope(x4[..., :r], cos, sin)
    else:  # it returns the pairs de-interleaved (evens, then odds): put them back
        rotated = apply_rope_interleave(x4[..., :r], cos, sin)
        rotated = rotated.unflatten(-1, (2, r // 2)).transpose(-1, -2).flatten(-2)
    out = torch.cat([rotated, x4[..., r:]], dim=-1)
    return out.reshape(x.shape)


BACKEND = peer_backend(
    TORCH, "peer:litgpt", packages={"torch": "torch", "litgpt": "litgpt"},
    version_of=("litgpt", "torch"), dtypes=("float64", "float32", "bfloat16", "float16"),
    overrides={"rope": rope},
    notes={"*/rope/property:rope_attention_factor*": YARN_NOTE,
           "*/rope/case:yarn_attention_factor": YARN_NOTE})
