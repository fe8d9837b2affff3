"""Baseline: posenc.rope (PyTorch, eager, CPU) against transformers' Llama rotary, side by side.

    python benchmarks/rope_cpu.py [--seq 4096] [--heads 32] [--dim 128] [--threads N]

Both sides compute cos/sin from positions on every call (the plain API; cached tables and
in-place paths are the performance issue's work) and rotate one [1, heads, seq, dim] float32
tensor. Prints median times and the ratio posenc / transformers.
"""

from __future__ import annotations

import argparse

import torch
import torch.utils.benchmark as benchmark

from posenc.backends import torch as pe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    x = torch.randn(1, args.heads, args.seq, args.dim)
    positions = torch.arange(args.seq)
    rows = {"posenc.rope (half)": lambda: pe.rope(x, positions, base=500000.0)}
    try:
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import (
            LlamaRotaryEmbedding,
            apply_rotary_pos_emb,
        )

        config = LlamaConfig(hidden_size=args.heads * args.dim, num_attention_heads=args.heads,
                             head_dim=args.dim,
                             rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
        rotary = LlamaRotaryEmbedding(config)
        ids = positions[None]

        def hf() -> torch.Tensor:
            cos, sin = rotary(x, ids)
            q, _ = apply_rotary_pos_emb(x, x[:, :1], cos, sin)
            return q

        rows["transformers Llama (cos/sin + apply)"] = hf
    except ImportError:
        print("transformers is not installed: posenc only")

    times = {}
    for label, fn in rows.items():
        timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=args.threads)
        times[label] = timer.blocked_autorange(min_run_time=2.0).median
        print(f"{label:40s} {times[label] * 1e3:9.2f} ms")
    if len(times) == 2:
        ours, theirs = times.values()
        print(f"ratio posenc / transformers: {ours / theirs:.2f}x "
              f"(shape 1x{args.heads}x{args.seq}x{args.dim} float32, {args.threads} threads)")


if __name__ == "__main__":
    main()
