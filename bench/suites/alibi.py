"""bias: ALiBi, BLOOM's ``build_alibi_tensor`` (key-only) against posenc's key-only and causal
forms."""

from __future__ import annotations

from collections.abc import Callable

from ..ours import pe_torch
from ..rows import BenchCase, BenchContext, PlannedRow, Timing
from ..sizes import Sizes


def _planned(heads: int, length: int) -> list[PlannedRow]:
    def bloom(ctx: BenchContext) -> Timing:
        import torch
        from transformers.models.bloom.modeling_bloom import build_alibi_tensor

        mask = torch.ones(1, length, dtype=torch.long, device=ctx.device)
        return Timing(lambda: build_alibi_tensor(mask, heads, torch.float32), "torch",
                      "key-only [heads, 1, k] from the attention mask")

    def ours(form: str, note: str) -> Callable[[BenchContext], Timing]:
        def build(ctx: BenchContext) -> Timing:
            pe = pe_torch()
            return Timing(lambda: pe.alibi_bias(heads, length, length, form=form, dtype="float32",
                                                device=ctx.device), "torch", note)

        return build

    p = f"alibi/{heads}x{length}"
    ref = f"{p}/transformers-bloom"
    return [
        PlannedRow(ref, "transformers BLOOM build_alibi_tensor", "main", bloom),
        PlannedRow(f"{p}/posenc-key-only", 'posenc pe.alibi_bias(form="key_only")', "main",
                   ours("key_only", "[heads, 1, k]: same form as BLOOM"), ref),
        PlannedRow(f"{p}/posenc-causal", 'posenc pe.alibi_bias(form="causal")', "main",
                   ours("causal", f"[heads, q, k]: {length}x more output than key-only"), ref),
    ]


def case(sizes: Sizes) -> BenchCase:
    heads, length = sizes.alibi
    return BenchCase(f"alibi-{heads}x{length}", "bias",
                     f"ALiBi bias {heads} heads, {length} x {length} float32",
                     _planned(heads, length))
