"""bias: the T5 relative-position bias, transformers' ``T5Attention.compute_bias`` and posenc's
``t5_bias`` (on the same learned table where transformers is installed)."""

from __future__ import annotations

from typing import Any

from ..ours import pe_torch
from ..rows import BenchCase, BenchContext, PlannedRow, Timing
from ..sizes import Sizes


def _planned(length: int, buckets: int, heads: int) -> list[PlannedRow]:
    def hf_attention(ctx: BenchContext) -> Any:
        from transformers import T5Config
        from transformers.models.t5.modeling_t5 import T5Attention

        def make() -> Any:
            config = T5Config(num_heads=heads, relative_attention_num_buckets=buckets, d_model=64,
                              d_kv=8, is_decoder=False)
            return T5Attention(config, has_relative_attention_bias=True).to(ctx.device)

        return ctx.memo("t5-attention", make)

    def hf(ctx: BenchContext) -> Timing:
        attention = hf_attention(ctx)
        return Timing(lambda: attention.compute_bias(length, length), "torch",
                      "bidirectional, [1, heads, q, k]")

    def ours(ctx: BenchContext) -> Timing:
        import torch

        pe = pe_torch()
        try:
            table = hf_attention(ctx).relative_attention_bias.weight.detach()
        except ImportError:
            table = torch.randn(buckets, heads, device=ctx.device)
        return Timing(lambda: pe.t5_bias(length, length, table, num_buckets=buckets), "torch",
                      "bidirectional, [heads, q, k]")

    p = f"t5/{length}"
    ref = f"{p}/transformers"
    return [
        PlannedRow(ref, "transformers T5Attention.compute_bias", "main", hf),
        PlannedRow(f"{p}/posenc", "posenc pe.t5_bias", "main", ours, ref),
    ]


def case(sizes: Sizes) -> BenchCase:
    length, buckets, heads = sizes.t5
    return BenchCase(f"t5-{length}", "bias", f"T5 bias q = k = {length}, {buckets} buckets, "
                     f"{heads} heads float32", _planned(length, buckets, heads))
