"""rotary, PyTorch eager: transformers' Llama rotary, rotary-embedding-torch and posenc's torch
API (plain, module, in place, preallocated outputs) rotating q and k."""

from __future__ import annotations

from typing import Any

from ..inputs import qk_shapes, torch_positions, torch_qk
from ..ours import pe_torch, rotary_module
from ..rivals import llama_rotary
from ..rows import BenchCase, BenchContext, PlannedRow, Timing
from ..sizes import BASE, Sizes


def _planned(seq: int) -> list[PlannedRow]:
    def hf(ctx: BenchContext) -> Timing:
        q, k = torch_qk(ctx, seq)
        rotary, apply = llama_rotary(ctx, ctx.sizes.head_dim)
        ids = torch_positions(ctx, 0, seq)[None]

        def fn() -> Any:
            cos, sin = rotary(q, ids)
            return apply(q, k, cos, sin)

        return Timing(fn, "torch", "cos/sin from position_ids every call")

    def ret(ctx: BenchContext) -> Timing:
        from importlib.metadata import version

        from rotary_embedding_torch import RotaryEmbedding

        q, k = torch_qk(ctx, seq)
        rot = RotaryEmbedding(dim=ctx.sizes.head_dim, theta=BASE).to(ctx.device)
        return Timing(lambda: (rot.rotate_queries_or_keys(q), rot.rotate_queries_or_keys(k)),
                      "torch", f"v{version('rotary-embedding-torch')}: interleaved pairs, "
                      "float32 m*theta angles cached, cos/sin per call")

    def plain(ctx: BenchContext) -> Timing:
        pe = pe_torch()
        q, k = torch_qk(ctx, seq)
        pos = torch_positions(ctx, 0, seq)
        return Timing(lambda: (pe.rope(q, pos, base=BASE), pe.rope(k, pos, base=BASE)), "torch",
                      "exact phases every call, q and k separately")

    def module(ctx: BenchContext) -> Timing:
        rot = rotary_module(ctx, table=True)
        q, k = torch_qk(ctx, seq)
        pos = torch_positions(ctx, 0, seq)
        return Timing(lambda: rot(q, pos, k=k), "torch", "cos/sin table, q and k in one pass")

    def inplace(ctx: BenchContext) -> Timing:
        rot = rotary_module(ctx, table=True)
        q, k = (t.clone() for t in torch_qk(ctx, seq))  # rotated again and again: norms kept
        pos = torch_positions(ctx, 0, seq)
        return Timing(lambda: rot(q, pos, k=k, inplace=True), "torch", "overwrites q and k")

    def out(ctx: BenchContext) -> Timing:
        import torch

        rot = rotary_module(ctx, table=True)
        q, k = torch_qk(ctx, seq)
        outs = (torch.empty_like(q), torch.empty_like(k))
        pos = torch_positions(ctx, 0, seq)
        return Timing(lambda: rot(q, pos, k=k, out=outs), "torch", "preallocated outputs")

    p = f"rope/{seq}/torch"
    ref = f"{p}/transformers"
    return [
        PlannedRow(ref, "transformers Llama rotary + apply_rotary_pos_emb", "main", hf),
        PlannedRow(f"{p}/rotary-embedding-torch", "rotary-embedding-torch rotate_queries_or_keys",
                   "main", ret, ref),
        PlannedRow(f"{p}/posenc-rope", "posenc pe.rope (plain API)", "main", plain, ref),
        PlannedRow(f"{p}/posenc-module", "posenc pe.RotaryEmbedding rot(q, pos, k=k)", "main",
                   module, ref),
        PlannedRow(f"{p}/posenc-inplace", "posenc rot(q, pos, k=k, inplace=True)", "main",
                   inplace, ref),
        PlannedRow(f"{p}/posenc-out", "posenc rot(q, pos, k=k, out=(q_out, k_out))", "main", out,
                   ref),
    ]


def case(sizes: Sizes, seq: int) -> BenchCase:
    return BenchCase(f"rope-torch-{seq}", "rope",
                     f"rotary S={seq}, PyTorch eager: {qk_shapes(sizes)}", _planned(seq))
