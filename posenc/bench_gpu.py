"""``posenc bench --device cuda --suite gpu``: rotary on a CUDA GPU, posenc's Triton kernel
against the kernels a user would otherwise pick, and against the device's copy bandwidth.

Each case rotates Llama-3-8B's q ``[B, 32, S, 128]`` and k ``[B, 8, S, 128]`` in bfloat16.
The first row copies q and k (the same bytes a rotary must read and write): its bandwidth is
the ceiling, and every row reports its own bandwidth (bytes read + written / time) and its
fraction of that ceiling. Ratios are against transformers' eager rotary. Rows are timed with
``triton.testing.do_bench`` (CUDA events, median); peers that are not installed give "not
installed" rows.
"""

from __future__ import annotations

from typing import Any

from .bench import BASE, Case, Ctx, Missing, Spec, Timing

SHAPES = ((1, 4096), (1, 8192), (1, 32768), (8, 4096))  # (batch, seq)
QUICK_SHAPES = ((1, 64),)
HEADS_Q, HEADS_K, HEAD_DIM = 32, 8, 128


def _qk(ctx: Ctx, batch: int, seq: int) -> tuple[Any, Any, Any]:
    import torch

    def make() -> tuple[Any, Any, Any]:
        g = torch.Generator(device=ctx.device).manual_seed(seq * 31 + batch)
        q = torch.randn(batch, HEADS_Q, seq, HEAD_DIM, device=ctx.device, generator=g,
                        dtype=torch.bfloat16)
        k = torch.randn(batch, HEADS_K, seq, HEAD_DIM, device=ctx.device, generator=g,
                        dtype=torch.bfloat16)
        ids = torch.arange(seq, device=ctx.device)[None].expand(batch, seq).contiguous()
        return q, k, ids

    return ctx.memo(("gpu-qk", batch, seq), make)


def _bytes(q: Any, k: Any) -> int:
    return 2 * (q.numel() + k.numel()) * q.element_size()  # read once, written once


def _hf(ctx: Ctx) -> tuple[Any, Any]:
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    def make() -> Any:
        config = LlamaConfig(hidden_size=HEADS_Q * HEAD_DIM, num_attention_heads=HEADS_Q,
                             num_key_value_heads=HEADS_K, head_dim=HEAD_DIM,
                             rope_parameters={"rope_type": "default", "rope_theta": BASE})
        return LlamaRotaryEmbedding(config).to(ctx.device)

    return ctx.memo("gpu-hf", make), apply_rotary_pos_emb


def _specs(batch: int, seq: int) -> list[Spec]:
    def copy(ctx: Ctx) -> Timing:
        import torch

        q, k, _ = _qk(ctx, batch, seq)
        qo, ko = torch.empty_like(q), torch.empty_like(k)
        return Timing(lambda: (qo.copy_(q), ko.copy_(k)), "cuda", "device-to-device copy of q and k",
                      bytes=_bytes(q, k))

    def hf(ctx: Ctx) -> Timing:
        q, k, ids = _qk(ctx, batch, seq)
        rotary, apply = _hf(ctx)

        def fn() -> Any:
            cos, sin = rotary(q, ids)
            return apply(q, k, cos, sin)

        return Timing(fn, "cuda", "cos/sin from position_ids, then apply_rotary_pos_emb",
                      bytes=_bytes(q, k))

    def hf_compiled(ctx: Ctx) -> Timing:
        import torch

        q, k, ids = _qk(ctx, batch, seq)
        rotary, apply = _hf(ctx)

        def fn(q: Any, k: Any, ids: Any) -> Any:
            cos, sin = rotary(q, ids)
            return apply(q, k, cos, sin)

        compiled = torch.compile(fn, fullgraph=True)
        return Timing(lambda: compiled(q, k, ids), "cuda", "torch.compile of the same",
                      bytes=_bytes(q, k))

    def tables(ctx: Ctx) -> tuple[Any, Any]:
        q, _, ids = _qk(ctx, batch, seq)
        rotary, _ = _hf(ctx)
        return rotary(q, ids)  # [B, S, 128] each, bfloat16

    def liger(ctx: Ctx) -> Timing:
        from liger_kernel.transformers.rope import liger_rotary_pos_emb

        q, k, _ = _qk(ctx, batch, seq)
        cos, sin = tables(ctx)
        return Timing(lambda: liger_rotary_pos_emb(q, k, cos, sin), "cuda",
                      "cos/sin tables given (not timed)", bytes=_bytes(q, k))

    def flash(ctx: Ctx) -> Timing:
        try:
            from flash_attn.ops.triton.rotary import apply_rotary
        except ImportError as exc:
            raise Missing("flash-attn (flash_attn.ops.triton.rotary) is not installed") from exc
        q, k, _ = _qk(ctx, batch, seq)
        cos, sin = (t[0, :, : HEAD_DIM // 2].contiguous() for t in tables(ctx))
        qt, kt = q.transpose(1, 2), k.transpose(1, 2)  # its layout: [B, S, H, D]
        return Timing(lambda: (apply_rotary(qt, cos, sin), apply_rotary(kt, cos, sin)), "cuda",
                      "cos/sin tables given (not timed), q and k in two launches",
                      bytes=_bytes(q, k))

    def ours(ctx: Ctx) -> Timing:
        from posenc.backends import torch_triton as pe

        q, k, ids = _qk(ctx, batch, seq)
        return Timing(lambda: pe.rope(q, ids, k=k, base=BASE), "cuda",
                      "pe.rope(q, ids, k=k): argument checks + one launch", bytes=_bytes(q, k))

    def ours_kernel(ctx: Ctx) -> Timing:
        from posenc.backends import torch_triton as pe

        q, k, ids = _qk(ctx, batch, seq)
        op = pe.prepared(q, ids, k=k, base=BASE)
        if op is None:
            raise Missing("the Triton kernel does not run here (needs CUDA)")
        return Timing(lambda: op(q, k), "cuda", "the kernel alone: positions read, cos/sin "
                      "computed in the kernel", bytes=_bytes(q, k))

    def ours_inplace(ctx: Ctx) -> Timing:
        from posenc.backends import torch_triton as pe

        q, k, ids = _qk(ctx, batch, seq)
        q, k = q.clone(), k.clone()  # rotated again and again: norms are kept
        return Timing(lambda: pe.rope(q, ids, k=k, base=BASE, inplace=True), "cuda",
                      "inplace=True", bytes=_bytes(q, k))

    p = f"gpu/{batch}x{seq}"
    ref = f"{p}/transformers"
    return [
        Spec(f"{p}/copy", "device copy of q and k (bandwidth ceiling)", "main", copy, ref),
        Spec(ref, "transformers Llama rotary + apply_rotary_pos_emb", "main", hf),
        Spec(f"{p}/transformers-compiled", "torch.compile(transformers rotary + apply)", "main",
             hf_compiled, ref),
        Spec(f"{p}/liger", "Liger-Kernel liger_rotary_pos_emb", "main", liger, ref),
        Spec(f"{p}/flash-attn", "flash-attn apply_rotary (Triton)", "main", flash, ref),
        Spec(f"{p}/posenc-triton", "posenc torch_triton.rope(q, ids, k=k)", "main", ours, ref),
        Spec(f"{p}/posenc-triton-kernel", "posenc Triton kernel alone", "main", ours_kernel, ref),
        Spec(f"{p}/posenc-triton-inplace", "posenc torch_triton.rope(..., inplace=True)", "main",
             ours_inplace, ref),
    ]


def plan(quick: bool) -> list[Case]:
    cases = []
    for batch, seq in QUICK_SHAPES if quick else SHAPES:
        cases.append(Case(f"gpu-{batch}x{seq}", "gpu",
                          f"rotary on CUDA, q [{batch},{HEADS_Q},{seq},{HEAD_DIM}], "
                          f"k [{batch},{HEADS_K},{seq},{HEAD_DIM}] bfloat16, base {BASE:g}",
                          _specs(batch, seq)))
    return cases


def time_cuda(fn: Any) -> float:
    """Median seconds of ``fn`` on the current CUDA stream (CUDA events)."""
    try:
        from triton.testing import do_bench
    except ImportError:
        do_bench = None
    if do_bench is not None:
        return float(do_bench(fn, warmup=50, rep=300, return_mode="median")) * 1e-3
    import statistics

    import torch

    for _ in range(10):
        fn()
    times = []
    for _ in range(100):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return statistics.median(times)

