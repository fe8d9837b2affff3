"""ALiBi and T5 biases on CUDA: FlexAttention with posenc's score_mods against SDPA with the
materialised bias.

    python benchmarks/flex_bias_gpu.py [--lengths 4096 8192] [--heads 32] [--dim 128]

For each length L and each bias (ALiBi causal; T5 encoder, bidirectional, scale 1; T5 decoder,
causal, scale 1) on one [1, heads, L, dim] bfloat16 q, k, v:

- flex: ``torch.compile(flex_attention)`` with ``pe.alibi_score_mod`` / ``pe.t5_score_mod``
  (score_mod built inside the timed call; the causal BlockMask is built once per shape, as a
  model does for all its layers, and its build time is printed separately);
- SDPA + bias: ``pe.alibi_bias`` / ``pe.t5_bias`` materialised as [heads, L, L] bfloat16 (plus
  the causal mask folded in as -inf), then ``scaled_dot_product_attention(attn_mask=bias)``;
- SDPA, bias prebuilt: the same attention call with the bias built outside the timing.

Times are medians (``triton.testing.do_bench``; CUDA events otherwise); memory is the peak
allocated during one call beyond what was allocated before it. Agreement: the largest
|flex − SDPA| and each side's largest error against float32 SDPA with the float32 bias.
Prints a markdown table. ``--device cpu --lengths 256`` smoke-tests the script without a GPU.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from posenc.backends import torch as pe
from posenc.bench.timers import time_cuda


def median_ms(fn: Callable[[], object], device: str) -> float:
    if device == "cuda":
        return time_cuda(fn) * 1e3
    fn()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def peak_mib(fn: Callable[[], object], device: str) -> float:
    if device != "cuda":
        return float("nan")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 2**20


def causal_bias(bias: torch.Tensor, length: int, device: str) -> torch.Tensor:
    allowed = torch.ones(length, length, dtype=torch.bool, device=device).tril()
    return bias.masked_fill(~allowed, float("-inf"))


def row(label: str, length: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
        flex: Callable[..., torch.Tensor], make_mod: Callable[[], object], block_mask: object,
        scale: float | None, make_bias: Callable[[torch.dtype], torch.Tensor]) -> str:
    """One table row: times, peak memory and agreement for one bias at one length."""
    device = q.device.type

    def run_flex() -> torch.Tensor:
        return flex(q, k, v, score_mod=make_mod(), block_mask=block_mask, scale=scale)

    def run_sdpa() -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=make_bias(q.dtype),
                                              scale=scale)

    prebuilt = make_bias(q.dtype)

    def run_prebuilt() -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=prebuilt, scale=scale)

    got, want = run_flex().float(), run_sdpa().float()
    exact = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                           attn_mask=make_bias(torch.float32), scale=scale)
    diff = (got - want).abs().max().item()
    flex_err, sdpa_err = (got - exact).abs().max().item(), (want - exact).abs().max().item()
    del got, want, exact
    times = [median_ms(f, device) for f in (run_flex, run_sdpa, run_prebuilt)]
    memory = [peak_mib(f, device) for f in (run_flex, run_sdpa)]
    return (f"| {label} | {length} | {times[0]:.2f} | {times[1]:.2f} | {times[2]:.2f} "
            f"| {memory[0]:.0f} / {memory[1]:.0f} | {diff:.3g} | {flex_err:.3g} / "
            f"{sdpa_err:.3g} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    device, heads = args.device, args.heads
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this benchmark is for a GPU (--device cpu to smoke-test)")
    dtype = torch.bfloat16
    flex = torch.compile(flex_attention, dynamic=False)  # one kernel per length, static shapes
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    print(f"device: {name}; torch {torch.__version__}; [1, {heads}, L, {args.dim}] {dtype}\n")
    print("| bias | L | flex + score_mod (ms) | SDPA + bias (ms) | SDPA, bias prebuilt (ms) "
          "| peak MiB flex / SDPA + bias | max abs flex − SDPA | max abs error vs fp32: "
          "flex / SDPA |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    notes = []
    for n in args.lengths:
        g = torch.Generator(device=device).manual_seed(0)
        q, k, v = (torch.randn(1, heads, n, args.dim, generator=g, device=device, dtype=dtype)
                   for _ in range(3))
        table = torch.randn(32, heads, generator=g, device=device, dtype=dtype)
        start = time.perf_counter()
        causal = create_block_mask(pe.causal_mask_mod(0, device=device), None, None, n, n,
                                   device=device)
        notes.append(f"causal BlockMask at L={n}: built once in "
                     f"{(time.perf_counter() - start) * 1e3:.1f} ms (first call, eager)")

        def alibi(dt: torch.dtype, n: int = n) -> torch.Tensor:
            return causal_bias(pe.alibi_bias(heads, n, n, dtype=dt, device=device), n, device)

        def t5_encoder(dt: torch.dtype, n: int = n, table: torch.Tensor = table) -> torch.Tensor:
            return pe.t5_bias(n, n, table.to(dt))

        def t5_decoder(dt: torch.dtype, n: int = n, table: torch.Tensor = table) -> torch.Tensor:
            return causal_bias(pe.t5_bias(n, n, table.to(dt), bidirectional=False), n, device)

        for label, make_mod, block_mask, scale, make_bias in (
                ("ALiBi causal", lambda n=n: pe.alibi_score_mod(heads, n, n, device=device),
                 causal, None, alibi),
                ("T5 encoder", lambda n=n, t=table: pe.t5_score_mod(n, n, t), None, 1.0,
                 t5_encoder),
                ("T5 decoder",
                 lambda n=n, t=table: pe.t5_score_mod(n, n, t, bidirectional=False), causal,
                 1.0, t5_decoder)):
            print(row(label, n, q, k, v, flex, make_mod, block_mask, scale, make_bias),
                  flush=True)
    print()
    for note in notes:
        print(f"- {note}")


if __name__ == "__main__":
    main()
