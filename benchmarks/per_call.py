"""Per-call cost of the rotary paths a model pays per layer and token (issue 19), as ratios
within one run: rounds interleave the rows, so a load that changes during the run moves every
row alike. Llama-3-8B shapes: q [1, 32, S, 128], k [1, 8, S, 128], theta 500000.

    python benchmarks/per_call.py torch       # decode at 4096 and prefill 4096, vs transformers
    python benchmarks/per_call.py jax         # eager decode, vs a hand-written jnp rotary
    python benchmarks/per_call.py tensorflow  # eager decode, vs a hand-written tf rotary

One framework per process (TensorFlow is best kept out of a process holding torch).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

BASE, HEADS, KV_HEADS, HEAD_DIM = 500000.0, 32, 8, 128


def interleaved(rows: dict[str, Callable[[], Any]], sync: Callable[[Any], Any], *,
                rounds: int, calls: int) -> dict[str, float]:
    """Median seconds per call of each row over ``rounds`` interleaved rounds."""
    for fn in rows.values():
        for _ in range(3):
            sync(fn())
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(rounds):
        for name, fn in rows.items():
            start = time.perf_counter()
            for _ in range(calls):
                out = fn()
            sync(out)
            times[name].append((time.perf_counter() - start) / calls)
    return {name: statistics.median(t) for name, t in times.items()}


def report(title: str, medians: dict[str, float], reference: str) -> None:
    print(f"\n{title}")
    for name, t in medians.items():
        unit, scale = ("ms", 1e3) if t > 1e-3 else ("us", 1e6)
        print(f"  {name:34s} {t * scale:9.1f} {unit}  {t / medians[reference]:5.2f}x")


def torch_rows() -> None:
    import torch
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import (
        LlamaRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    import posenc.backends.torch as pe

    torch.set_num_threads(1)
    config = LlamaConfig(hidden_size=HEADS * HEAD_DIM, num_attention_heads=HEADS,
                         num_key_value_heads=KV_HEADS, rope_theta=BASE,
                         max_position_embeddings=8192)
    hf = LlamaRotaryEmbedding(config)
    table = pe.RotaryEmbedding(HEAD_DIM, base=BASE, max_positions=8192)
    exact = pe.RotaryEmbedding(HEAD_DIM, base=BASE)
    for label, seq, offset, rounds, calls in (("decode, position 4096", 1, 4096, 7, 300),
                                              ("prefill 4096", 4096, 0, 5, 3)):
        q = torch.randn(1, HEADS, seq, HEAD_DIM)
        k = torch.randn(1, KV_HEADS, seq, HEAD_DIM)
        pos = torch.arange(offset, offset + seq)

        def transformers_rotary(q=q, k=k, ids=pos[None]) -> Any:
            cos, sin = hf(q, ids)
            return apply_rotary_pos_emb(q, k, cos, sin)

        rows = {
            "transformers": transformers_rotary,
            "RotaryEmbedding with a table": lambda q=q, k=k, p=pos: table(q, p, k=k),
            "RotaryEmbedding exact phases": lambda q=q, k=k, p=pos: exact(q, p, k=k),
            "pe.rope on q and on k": lambda q=q, k=k, p=pos: (pe.rope(q, p, base=BASE),
                                                             pe.rope(k, p, base=BASE)),
        }
        with torch.no_grad():
            medians = interleaved(rows, lambda out: out, rounds=rounds, calls=calls)
        report(f"torch eager, 1 thread, {label}", medians, "transformers")


def jax_rows() -> None:
    import jax
    import jax.numpy as jnp

    import posenc.backends.jax as pj

    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.standard_normal((1, HEADS, 1, HEAD_DIM), dtype=np.float32))
    k = jnp.asarray(rng.standard_normal((1, KV_HEADS, 1, HEAD_DIM), dtype=np.float32))
    pos = jnp.asarray([4096], dtype=jnp.int32)
    inv = 1.0 / (BASE ** (jnp.arange(0, HEAD_DIM, 2, dtype=jnp.float32) / HEAD_DIM))

    def hand(x: Any, p: Any) -> Any:
        f = p[:, None].astype(jnp.float32) * inv
        emb = jnp.concatenate([f, f], -1)
        x1, x2 = x[..., : HEAD_DIM // 2], x[..., HEAD_DIM // 2 :]
        return x * jnp.cos(emb) + jnp.concatenate([-x2, x1], -1) * jnp.sin(emb)

    rows = {"hand-written jnp rotary (eager)": lambda: (hand(q, pos), hand(k, pos)),
            "posenc.backends.jax.rope (eager)": lambda: (pj.rope(q, pos, base=BASE),
                                                         pj.rope(k, pos, base=BASE))}
    medians = interleaved(rows, jax.block_until_ready, rounds=7, calls=50)
    report("JAX eager, decode at position 4096", medians, "hand-written jnp rotary (eager)")


def tensorflow_rows() -> None:
    import tensorflow as tf

    import posenc.backends.tensorflow as pt

    rng = np.random.default_rng(0)
    q = tf.constant(rng.standard_normal((1, HEADS, 1, HEAD_DIM), dtype=np.float32))
    k = tf.constant(rng.standard_normal((1, KV_HEADS, 1, HEAD_DIM), dtype=np.float32))
    pos = tf.constant([4096])
    inv = 1.0 / (BASE ** (tf.range(0, HEAD_DIM, 2, dtype=tf.float32) / HEAD_DIM))

    def hand(x: Any, p: Any) -> Any:
        f = tf.cast(p[:, None], tf.float32) * inv
        emb = tf.concat([f, f], -1)
        x1, x2 = x[..., : HEAD_DIM // 2], x[..., HEAD_DIM // 2 :]
        return x * tf.cos(emb) + tf.concat([-x2, x1], -1) * tf.sin(emb)

    rows = {"hand-written tf rotary (eager)": lambda: (hand(q, pos), hand(k, pos)),
            "posenc.backends.tensorflow.rope (eager)": lambda: (pt.rope(q, pos, base=BASE),
                                                                pt.rope(k, pos, base=BASE))}
    medians = interleaved(rows, lambda out: [t.numpy() for t in out], rounds=7, calls=50)
    report("TensorFlow eager, decode at position 4096", medians, "hand-written tf rotary (eager)")


if __name__ == "__main__":
    {"torch": torch_rows, "jax": jax_rows, "tensorflow": tensorflow_rows}[sys.argv[1]]()
