"""The shapes a bench run uses: the full measurement and the quick smoke test."""

from __future__ import annotations

from dataclasses import dataclass

BASE = 500000.0  # Llama-3 rope_theta


@dataclass(frozen=True)
class Sizes:
    seqs: tuple[int, ...]
    q_heads: int
    kv_heads: int
    head_dim: int
    offsets: tuple[int, ...]
    sin_shape: tuple[int, int]
    t5: tuple[int, int, int]  # length, buckets, heads
    alibi: tuple[int, int]  # heads, length
    min_run_time: float


FULL = Sizes(seqs=(4096, 8192), q_heads=32, kv_heads=8, head_dim=128,
             offsets=(4096, 65536, 1048576), sin_shape=(4096, 1024), t5=(1024, 32, 16),
             alibi=(32, 2048), min_run_time=1.0)
QUICK = Sizes(seqs=(64,), q_heads=4, kv_heads=2, head_dim=32, offsets=(4096, 1048576),
              sin_shape=(64, 32), t5=(32, 32, 4), alibi=(4, 32), min_run_time=0.01)
