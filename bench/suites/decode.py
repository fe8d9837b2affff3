"""decode: one token at a large offset, torch eager (transformers, posenc plain and module)
and jitted JAX (the jnp rotary, posenc's with the offset a traced array)."""

from __future__ import annotations

from typing import Any

from ..inputs import jax_qk, torch_positions, torch_qk
from ..ours import jax_fns, pe_torch, rotary_module
from ..rivals import llama_rotary
from ..rows import BenchCase, BenchContext, PlannedRow, Timing
from ..sizes import BASE, Sizes


def _planned(offset: int) -> list[PlannedRow]:
    def hf(ctx: BenchContext) -> Timing:
        q, k = torch_qk(ctx, 1)
        rotary, apply = llama_rotary(ctx, ctx.sizes.head_dim)
        ids = torch_positions(ctx, offset, 1)[None]

        def fn() -> Any:
            cos, sin = rotary(q, ids)
            return apply(q, k, cos, sin)

        return Timing(fn, "torch", "float32 m*theta (inexact at large offsets)")

    def plain(ctx: BenchContext) -> Timing:
        pe = pe_torch()
        q, k = torch_qk(ctx, 1)
        pos = torch_positions(ctx, offset, 1)
        return Timing(lambda: (pe.rope(q, pos, base=BASE), pe.rope(k, pos, base=BASE)), "torch")

    def module(ctx: BenchContext) -> Timing:
        rot = rotary_module(ctx, table=False)
        q, k = torch_qk(ctx, 1)
        pos = torch_positions(ctx, offset, 1)
        return Timing(lambda: rot(q, pos, k=k), "torch", "no table: phases per call")

    def jnp_rotary(ctx: BenchContext) -> Timing:
        import jax.numpy as jnp

        q, k = jax_qk(ctx, 1)
        pos = jnp.asarray([offset], dtype=jnp.int32)
        f = jax_fns(ctx)["jnp"]
        return Timing(lambda: f(q, k, pos), "jax", "jax.jit, float32 m*theta")

    def ours_jax(ctx: BenchContext) -> Timing:
        import jax.numpy as jnp

        q, k = jax_qk(ctx, 1)
        pos = jnp.asarray([offset], dtype=jnp.int32)  # traced: a new offset is not a new trace
        fns = jax_fns(ctx)
        f, traces = fns["ours"], fns["traces"]
        before = len(traces)
        f(q, k, pos)
        note = "jax.jit, offset a traced array: " + (
            "reuses the compiled call" if len(traces) == before else "first offset, compiles")
        return Timing(lambda: f(q, k, pos), "jax", note)

    p = f"decode/{offset}"
    ref, jref = f"{p}/transformers", f"{p}/jnp-rotary"
    return [
        PlannedRow(ref, "transformers Llama rotary + apply_rotary_pos_emb", "main", hf),
        PlannedRow(f"{p}/posenc-rope", "posenc pe.rope (plain API)", "main", plain, ref),
        PlannedRow(f"{p}/posenc-module", "posenc pe.RotaryEmbedding (no table) rot(q, pos, k=k)",
                   "main", module, ref),
        PlannedRow(jref, "hand-written jnp rotary (jit)", "main", jnp_rotary, ref),
        PlannedRow(f"{p}/posenc-jax", "posenc posenc.backends.jax.rope (jit)", "main", ours_jax,
                   jref),
    ]


def case(sizes: Sizes, offset: int) -> BenchCase:
    s = sizes
    return BenchCase(f"decode-{offset}", "rope",
                     f"decode, one token at offset {offset}: q [1,{s.q_heads},1,{s.head_dim}], "
                     f"k [1,{s.kv_heads},1,{s.head_dim}]", _planned(offset))
