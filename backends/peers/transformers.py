"""transformers as a posenc backend: ``posenc conformance --backend peer:transformers``.

- rope: ``LlamaRotaryEmbedding`` + ``apply_rotary_pos_emb`` (GPT-NeoX's pair for partial
  rotary), with every scaling schedule transformers has; half layout only.
- rope_frequencies: ``ROPE_INIT_FUNCTIONS`` (GPT-NeoX's default parameters for the plain one).
- t5_bucket / t5_bias: ``T5Attention._relative_position_bucket`` and ``compute_bias``.
- alibi_slopes / alibi_bias: BLOOM's ``build_alibi_tensor`` (key-only ``m·j``, max_bias 8);
  MPT's ALiBi is ``peer:transformers-mpt`` (:mod:`.transformers_mpt`).
- deberta_bucket: DeBERTa-v2's ``make_log_bucket_position``.
- sinusoidal: Marian's ``MarianSinusoidalPositionalEmbedding`` (concat layout, base 10000).

transformers computes angles, frequencies and slopes in float32 by design: those adapters
raise :class:`posenc.Unsupported` for float64 results instead of being judged on them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..torch import BACKEND as TORCH
from ._common import as_bhsd, peer_backend, require, rotary_dim_of

FLOAT32_BY_DESIGN = "transformers computes this in float32 by design (no float64 path)"


def _torch() -> Any:
    import torch

    return torch


def _not_float64(dtype: Any) -> None:
    require(dtype is None or dtype != _torch().float64, FLOAT32_BY_DESIGN)


def _config(dim: int, scaling: dict[str, Any] | None, base: float, cls: str) -> Any:
    """A transformers config of one head of width ``dim`` with ``scaling`` as rope_parameters
    (the dict's own rope_theta wins over ``base``, as in posenc)."""
    import transformers

    params = dict(scaling or {"rope_type": "default"})
    params.setdefault("rope_theta", float(base))
    if "type" in params:
        params["rope_type"] = params.pop("type")
    require(params.get("rope_type") != "ntk",
            "transformers has no static NTK schedule (only the dynamic one)")
    if params.get("rope_type") == "mrope":  # the frequencies are the default ones
        params["rope_type"] = "default"
        params.pop("mrope_section", None)
    if cls == "GPTNeoX":  # its config defaults to rotary_pct 0.25
        params.setdefault("partial_rotary_factor", 1.0)
    max_positions = params.pop("max_position_embeddings",
                               4 * params.get("original_max_position_embeddings", 2048))
    return getattr(transformers, f"{cls}Config")(
        hidden_size=dim, num_attention_heads=1, num_key_value_heads=1, head_dim=dim,
        max_position_embeddings=max_positions, rope_parameters=params)


def llama_rotary(head_dim: int, base: float, device: Any = None) -> tuple[Any, Any]:
    """transformers' ``LlamaRotaryEmbedding`` for heads of ``head_dim`` features (on ``device``)
    and its ``apply_rotary_pos_emb``: the pair a Llama model calls (``posenc bench`` times it)."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    rotary = LlamaRotaryEmbedding(_config(head_dim, None, base, "Llama")).to(device)
    return rotary, apply_rotary_pos_emb


def rope(x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
         rotary_dim: int | None = None, scaling: dict[str, Any] | None = None,
         seq_len: int | None = None) -> Any:
    torch = _torch()
    require(layout == "half", "transformers' apply_rotary_pos_emb pairs (i, i + d/2) only")
    _not_float64(x.dtype)
    dim = x.shape[-1]
    r = rotary_dim_of(dim, rotary_dim, scaling)
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type"))
    partial = r != dim and kind != "proportional"
    if partial:  # GPT-NeoX (and Phi) rotate the first dim * partial_rotary_factor features
        from transformers.models.gpt_neox.modeling_gpt_neox import (
            GPTNeoXRotaryEmbedding as Rotary,
        )
        from transformers.models.gpt_neox.modeling_gpt_neox import apply_rotary_pos_emb
        scaling = {**(scaling or {"rope_type": "default"}), "partial_rotary_factor": r / dim}
    else:
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding as Rotary
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    config = _config(dim, scaling, base, "GPTNeoX" if partial else "Llama")
    shape, pos = as_bhsd(tuple(x.shape), None if positions is None else positions.cpu().numpy())
    if seq_len is not None and kind in ("dynamic", "longrope"):
        require(seq_len == int(pos.max()) + 1, "transformers scales dynamic/longrope for "
                f"max(position_ids) + 1 = {int(pos.max()) + 1}, not a given seq_len={seq_len}")
    rotary = Rotary(config).to(x.device)
    x4 = x.reshape(shape)
    with torch.no_grad():
        cos, sin = rotary(x4, torch.from_numpy(pos).to(x.device))
        q, _ = apply_rotary_pos_emb(x4, x4, cos, sin, unsqueeze_dim=1)
    return q.reshape(x.shape)


def rope_frequencies(dim: int, *, base: float = 10000.0, scaling: dict[str, Any] | None = None,
                     seq_len: int | None = None, dtype: Any = None, device: Any = None,
                     ) -> tuple[Any, float]:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding

    _not_float64(dtype)
    params = dict(scaling or {})
    kind = params.get("rope_type", params.get("type"))
    if kind == "ntk_alpha" or (kind == "dynamic" and params.get("alpha")):
        # transformers has NTK-alpha in HunYuan's rotary only (Hunyuan's "dynamic" + alpha)
        from transformers.models.hunyuan_v1_dense.modeling_hunyuan_v1_dense import (
            HunYuanDenseV1RotaryEmbedding as HunYuanRotary,
        )

        config = _config(dim, scaling, base, "HunYuanDenseV1")
        inv_freq, attention = HunYuanRotary.compute_ntk_alpha_rope_parameters(config)
        return inv_freq.to(device=device, dtype=dtype or _torch().float32), float(attention)
    config = _config(dim, scaling, base, "GPTNeoX")
    kind = config.rope_parameters["rope_type"]
    if kind == "default":
        inv_freq, attention = GPTNeoXRotaryEmbedding.compute_default_rope_parameters(config)
    else:
        inv_freq, attention = ROPE_INIT_FUNCTIONS[kind](config, None, seq_len=seq_len)
    return inv_freq.to(device=device, dtype=dtype or _torch().float32), float(attention)


def t5_bucket(relative_position: Any, *, bidirectional: bool = True, num_buckets: int = 32,
              max_distance: int = 128) -> Any:
    from transformers.models.t5.modeling_t5 import T5Attention

    return T5Attention._relative_position_bucket(relative_position, bidirectional=bidirectional,
                                                 num_buckets=num_buckets,
                                                 max_distance=max_distance)


def t5_bias(q_len: int, k_len: int, table: Any, *, bidirectional: bool = True,
            num_buckets: int = 32, max_distance: int = 128, query_offset: int = 0) -> Any:
    torch = _torch()
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    config = T5Config(d_model=8, d_kv=4, num_heads=table.shape[1], is_decoder=not bidirectional,
                      relative_attention_num_buckets=num_buckets,
                      relative_attention_max_distance=max_distance)
    attention = T5Attention(config, has_relative_attention_bias=True, layer_idx=0)
    attention = attention.to(device=table.device, dtype=table.dtype)
    with torch.no_grad():
        attention.relative_attention_bias.weight.copy_(table)
        bias = attention.compute_bias(q_len, k_len, device=table.device,
                                      past_seen_tokens=query_offset)
    return bias[0]


def deberta_bucket(relative_position: Any, *, bucket_size: int = 256, max_position: int = 512,
                   clamp: str = "transformers") -> Any:
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    require(clamp == "transformers", "transformers has no clamp='original' (microsoft/DeBERTa's)")
    # build_relative_position casts the (floating) buckets to long, as here
    return make_log_bucket_position(relative_position, bucket_size, max_position).long()


def _bloom_key_only(num_heads: int, k_len: int, max_bias: float, dtype: Any, device: Any) -> Any:
    """BLOOM's alibi for a full attention mask: slope * (cumsum(mask) - 1) = m·j, [h, 1, k]."""
    torch = _torch()
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    require(max_bias == 8.0, "BLOOM's slopes are fixed at max_bias 8")
    _not_float64(dtype)
    mask = torch.ones((1, k_len), dtype=torch.int64, device=device)
    return build_alibi_tensor(mask, num_heads, dtype or torch.float32).reshape(num_heads, 1, k_len)


def alibi_slopes(num_heads: int, *, max_bias: float = 8.0, dtype: Any = None,
                 device: Any = None) -> Any:
    return _bloom_key_only(num_heads, 2, max_bias, dtype, device)[:, 0, 1]


def alibi_bias(num_heads: int, q_len: int, k_len: int, *, form: str = "causal",
               max_bias: float = 8.0, head_dim: int | None = None, dtype: Any = None,
               device: Any = None) -> Any:
    require(head_dim is None, "BLOOM adds the bias after the 1/sqrt(d) scaling; Falcon's "
            "order (head_dim) is not its")
    require(form in ("causal", "key_only"), "BLOOM builds the key-only bias m·j (softmax-"
            "equivalent to the causal form), not the symmetric one")
    bias = _bloom_key_only(num_heads, k_len, max_bias, dtype, device)
    # BLOOM adds the same row m·j to every query; the causal row differs by m·i (softmax-equal)
    return bias if form == "key_only" else bias.expand(num_heads, q_len, k_len)


def sinusoidal(positions: Any, dim: int, *, base: float = 10000.0, layout: str = "interleaved",
               padding_idx: int | None = None, dtype: Any = None, device: Any = None) -> Any:
    torch = _torch()
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    require(layout == "concat", "Marian's table is the concat layout (sin half, cos half)")
    require(base == 10000.0, "Marian's base is fixed at 10000")
    require(padding_idx is None, "Marian's table has no padding row")
    _not_float64(dtype)
    pos = positions.cpu().numpy()
    require(pos.size == 0 or int(pos.min()) >= 0, "Marian's table starts at position 0")
    layer = MarianSinusoidalPositionalEmbedding(int(np.max(pos, initial=0)) + 1, dim)
    with torch.no_grad():  # what the model's _init_weights does
        layer.weight.copy_(layer.create_weight())
        table = layer(tuple(pos.shape), position_ids=positions.cpu())
    return table.to(device=device or positions.device, dtype=dtype or torch.float32)


BACKEND = peer_backend(
    TORCH, "peer:transformers", packages={"torch": "torch", "transformers": "transformers"},
    version_of=("transformers", "torch"), dtypes=("float64", "float32", "bfloat16", "float16"),
    overrides={"rope": rope, "rope_frequencies": rope_frequencies, "t5_bucket": t5_bucket,
               "t5_bias": t5_bias, "deberta_bucket": deberta_bucket,
               "alibi_slopes": alibi_slopes, "alibi_bias": alibi_bias,
               "sinusoidal": sinusoidal},
    comparisons={"alibi_bias": "softmax_equivalent"},
    notes={
        "*/rope_frequencies/case:llama3_*": "llama3's smooth band: s from a float32 wavelength "
        "2π/θ, then (1 − s)·θ/factor + s·θ in float32, a few ulps (~4e-7 relative) over the "
        "spec's 2·eps32",
        "*/t5_bucket/property:t5_bucket_exact*": "a drawn distance at a float32 log tie (2^17, "
        "2^19): transformers' float32 log, as the float32_log diagnosis of the tie cases",
        "*/deberta_bucket/property:deberta_bucket_exact*": "a drawn distance at a float32 log "
        "tie: transformers' float32 log, as the float32_log diagnosis of the tie cases",
    })
