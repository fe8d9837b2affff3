"""gpu (``--device cuda``): rotary on a CUDA GPU, posenc's Triton kernel against the kernels a
user would otherwise pick, and against the device's copy bandwidth.

Each case rotates Llama-3-8B's q ``[B, 32, S, 128]`` and k ``[B, 8, S, 128]`` in bfloat16 (and,
at 16K tokens and beyond, in float32 too).
The first row copies q and k (the same bytes a rotary must read and write): its bandwidth is
the ceiling, and every row reports its own bandwidth (bytes read + written / time) and its
fraction of that ceiling. Ratios are against transformers' eager rotary. Rows are timed with
``triton.testing.do_bench`` (CUDA events, median); rivals that are not installed give "not
installed" rows.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from ..rivals import llama_rotary
from ..rows import BenchCase, BenchContext, Missing, PlannedRow, Timing
from ..sizes import BASE

# (batch, seq, dtype)
SHAPES = ((1, 4096, "bfloat16"), (1, 8192, "bfloat16"), (1, 16384, "bfloat16"),
          (1, 32768, "bfloat16"), (8, 4096, "bfloat16"), (1, 16384, "float32"),
          (1, 32768, "float32"))
QUICK_SHAPES = ((1, 64, "bfloat16"),)
HEADS_Q, HEADS_K, HEAD_DIM = 32, 8, 128


def _qk(ctx: BenchContext, batch: int, seq: int, dtype: str) -> tuple[Any, Any, Any]:
    import torch

    def make() -> tuple[Any, Any, Any]:
        g = torch.Generator(device=ctx.device).manual_seed(seq * 31 + batch)
        q = torch.randn(batch, HEADS_Q, seq, HEAD_DIM, device=ctx.device, generator=g,
                        dtype=getattr(torch, dtype))
        k = torch.randn(batch, HEADS_K, seq, HEAD_DIM, device=ctx.device, generator=g,
                        dtype=getattr(torch, dtype))
        ids = torch.arange(seq, device=ctx.device)[None].expand(batch, seq).contiguous()
        return q, k, ids

    return ctx.memo(("gpu-qk", batch, seq, dtype), make)


def _bytes(q: Any, k: Any) -> int:
    return 2 * (q.numel() + k.numel()) * q.element_size()  # read once, written once


def _hf(ctx: BenchContext) -> tuple[Any, Any]:
    return llama_rotary(ctx, HEAD_DIM, key="gpu-hf")


# A case's shape: (batch, seq, dtype). Each row's timing is built from it and the context.
Shape = tuple[int, int, str]


def _copy(shape: Shape, ctx: BenchContext) -> Timing:
    import torch

    q, k, _ = _qk(ctx, *shape)
    qo, ko = torch.empty_like(q), torch.empty_like(k)
    return Timing(lambda: (qo.copy_(q), ko.copy_(k)), "cuda", "device-to-device copy of q and k",
                  bytes=_bytes(q, k))


def _transformers(shape: Shape, ctx: BenchContext, compiled: bool = False) -> Timing:
    import torch

    q, k, ids = _qk(ctx, *shape)
    rotary, apply = _hf(ctx)

    def fn(q: Any, k: Any, ids: Any) -> Any:
        cos, sin = rotary(q, ids)
        return apply(q, k, cos, sin)

    if compiled:
        run = torch.compile(fn, fullgraph=True)
        return Timing(lambda: run(q, k, ids), "cuda", "torch.compile of the same",
                      bytes=_bytes(q, k))
    return Timing(lambda: fn(q, k, ids), "cuda",
                  "cos/sin from position_ids, then apply_rotary_pos_emb", bytes=_bytes(q, k))


def _tables(shape: Shape, ctx: BenchContext) -> tuple[Any, Any]:
    q, _, ids = _qk(ctx, *shape)
    rotary, _ = _hf(ctx)
    return rotary(q, ids)  # [B, S, 128] each, in q's dtype


def _liger(shape: Shape, ctx: BenchContext) -> Timing:
    from liger_kernel.transformers.rope import liger_rotary_pos_emb

    q, k, _ = _qk(ctx, *shape)
    cos, sin = _tables(shape, ctx)
    return Timing(lambda: liger_rotary_pos_emb(q, k, cos, sin), "cuda",
                  "cos/sin tables given (not timed)", bytes=_bytes(q, k))


def _flash(shape: Shape, ctx: BenchContext) -> Timing:
    try:
        from flash_attn.ops.triton.rotary import apply_rotary
    except ImportError as exc:
        raise Missing("flash-attn (flash_attn.ops.triton.rotary) is not installed") from exc
    q, k, _ = _qk(ctx, *shape)
    cos, sin = (t[0, :, : HEAD_DIM // 2].contiguous() for t in _tables(shape, ctx))
    qt, kt = q.transpose(1, 2), k.transpose(1, 2)  # its layout: [B, S, H, D]
    return Timing(lambda: (apply_rotary(qt, cos, sin), apply_rotary(kt, cos, sin)), "cuda",
                  "cos/sin tables given (not timed), q and k in two launches",
                  bytes=_bytes(q, k))


def _ours(shape: Shape, ctx: BenchContext) -> Timing:
    from posenc.backends import torch_triton as pe

    q, k, ids = _qk(ctx, *shape)
    return Timing(lambda: pe.rope(q, ids, k=k, base=BASE), "cuda",
                  "pe.rope(q, ids, k=k): argument checks + one launch", bytes=_bytes(q, k))


def _ours_kernel(shape: Shape, ctx: BenchContext) -> Timing:
    from posenc.backends import torch_triton as pe

    q, k, ids = _qk(ctx, *shape)
    op = pe.prepared(q, ids, k=k, base=BASE)
    if op is None:
        raise Missing("the Triton kernel does not run here (needs CUDA)")
    return Timing(lambda: op(q, k), "cuda", "the kernel alone: positions read, cos/sin "
                  "computed in the kernel", bytes=_bytes(q, k))


def _ours_inplace(shape: Shape, ctx: BenchContext) -> Timing:
    from posenc.backends import torch_triton as pe

    q, k, ids = _qk(ctx, *shape)
    q, k = q.clone(), k.clone()  # rotated again and again: norms are kept
    return Timing(lambda: pe.rope(q, ids, k=k, base=BASE, inplace=True), "cuda",
                  "inplace=True", bytes=_bytes(q, k))


def _module(shape: Shape, ctx: BenchContext, table: bool) -> Timing:
    from posenc.backends.torch.layers import RotaryEmbedding

    q, k, ids = _qk(ctx, *shape)
    rotary = RotaryEmbedding(HEAD_DIM, base=BASE, max_positions=shape[1] if table else None,
                             device=ctx.device)
    return Timing(lambda: rotary(q, ids, k=k), "cuda",
                  "RotaryEmbedding(q, ids, k=k), " + ("cos/sin rows gathered from its table"
                                                      if table else "phases per call"),
                  bytes=_bytes(q, k))


def _module_into(shape: Shape, ctx: BenchContext, how: str) -> Timing:
    import torch

    from posenc.backends.torch.layers import RotaryEmbedding

    q, k, ids = _qk(ctx, *shape)
    rotary = RotaryEmbedding(HEAD_DIM, base=BASE, max_positions=shape[1], device=ctx.device)
    if how == "inplace":
        qi, ki = q.clone(), k.clone()  # rotated again and again: norms are kept
        return Timing(lambda: rotary(qi, ids, k=ki, inplace=True), "cuda",
                      "RotaryEmbedding(q, ids, k=k, inplace=True)", bytes=_bytes(q, k))
    if how == "out":
        qo, ko = torch.empty_like(q), torch.empty_like(k)
        return Timing(lambda: rotary(q, ids, k=k, out=(qo, ko)), "cuda",
                      "RotaryEmbedding(q, ids, k=k, out=(q_out, k_out))", bytes=_bytes(q, k))
    compiled = torch.compile(lambda q, k, ids: rotary(q, ids, k=k), fullgraph=True)
    return Timing(lambda: compiled(q, k, ids), "cuda", "torch.compile(RotaryEmbedding): "
                  "the posenc::rotary custom op in the graph", bytes=_bytes(q, k))


def _ours_compiled(shape: Shape, ctx: BenchContext) -> Timing:
    import torch

    from posenc.backends import torch_triton as pe

    q, k, ids = _qk(ctx, *shape)
    compiled = torch.compile(lambda q, k, ids: pe.rope(q, ids, k=k, base=BASE), fullgraph=True)
    return Timing(lambda: compiled(q, k, ids), "cuda", "torch.compile(torch_triton.rope): "
                  "the posenc::rotary custom op in the graph", bytes=_bytes(q, k))


def _planned(batch: int, seq: int, dtype: str) -> list[PlannedRow]:
    shape = (batch, seq, dtype)
    p = f"gpu/{batch}x{seq}" + ("" if dtype == "bfloat16" else f"-{dtype}")
    ref = f"{p}/transformers"
    rows = [  # (id, label, timing, the row its ratio divides by)
        (f"{p}/copy", "device copy of q and k (bandwidth ceiling)", partial(_copy, shape), ref),
        (ref, "transformers Llama rotary + apply_rotary_pos_emb",
         partial(_transformers, shape), None),
        (f"{p}/transformers-compiled", "torch.compile(transformers rotary + apply)",
         partial(_transformers, shape, compiled=True), ref),
        (f"{p}/liger", "Liger-Kernel liger_rotary_pos_emb", partial(_liger, shape), ref),
        (f"{p}/flash-attn", "flash-attn apply_rotary (Triton)", partial(_flash, shape), ref),
        (f"{p}/posenc-triton", "posenc torch_triton.rope(q, ids, k=k)", partial(_ours, shape),
         ref),
        (f"{p}/posenc-triton-kernel", "posenc Triton kernel alone",
         partial(_ours_kernel, shape), ref),
        (f"{p}/posenc-triton-inplace", "posenc torch_triton.rope(..., inplace=True)",
         partial(_ours_inplace, shape), ref),
        (f"{p}/posenc-module-table", "posenc RotaryEmbedding(max_positions=S) on CUDA",
         partial(_module, shape, table=True), ref),
        (f"{p}/posenc-module", "posenc RotaryEmbedding (no table) on CUDA",
         partial(_module, shape, table=False), ref),
        (f"{p}/posenc-module-inplace", "posenc RotaryEmbedding, inplace=True",
         partial(_module_into, shape, how="inplace"), ref),
        (f"{p}/posenc-module-out", "posenc RotaryEmbedding, out=",
         partial(_module_into, shape, how="out"), ref),
        (f"{p}/posenc-module-compiled", "posenc torch.compile(RotaryEmbedding)",
         partial(_module_into, shape, how="compiled"), ref),
        (f"{p}/posenc-triton-compiled", "posenc torch.compile(torch_triton.rope)",
         partial(_ours_compiled, shape), ref),
    ]
    return [PlannedRow(name, label, "main", timing, against)
            for name, label, timing, against in rows]


def cases(quick: bool) -> list[BenchCase]:
    return [BenchCase(f"gpu-{batch}x{seq}" + ("" if dtype == "bfloat16" else f"-{dtype}"), "gpu",
                      f"rotary on CUDA, q [{batch},{HEADS_Q},{seq},{HEAD_DIM}], "
                      f"k [{batch},{HEADS_K},{seq},{HEAD_DIM}] {dtype}, base {BASE:g}",
                      _planned(batch, seq, dtype))
            for batch, seq, dtype in (QUICK_SHAPES if quick else SHAPES)]
