"""The inputs of the rotary rows: q and k (float32, seeded by the sequence length) as NumPy,
torch, JAX or TensorFlow arrays, and torch positions; each made once per run."""

from __future__ import annotations

from typing import Any

from .rows import BenchContext
from .sizes import BASE, Sizes


def qk_shapes(sizes: Sizes) -> str:
    """The rotary cases' inputs, for their titles."""
    return (f"q [1,{sizes.q_heads},S,{sizes.head_dim}], k [1,{sizes.kv_heads},S,"
            f"{sizes.head_dim}] float32, base {BASE:g}")


def np_qk(ctx: BenchContext, seq: int) -> tuple[Any, Any]:
    import numpy as np

    def make() -> tuple[Any, Any]:
        s = ctx.sizes
        rng = np.random.default_rng(seq)
        q = rng.standard_normal((1, s.q_heads, seq, s.head_dim), dtype=np.float32)
        k = rng.standard_normal((1, s.kv_heads, seq, s.head_dim), dtype=np.float32)
        return q, k

    return ctx.memo(("np", seq), make)


def torch_qk(ctx: BenchContext, seq: int) -> tuple[Any, Any]:
    import torch

    q, k = np_qk(ctx, seq)
    return ctx.memo(("torch", seq), lambda: (torch.from_numpy(q).to(ctx.device),
                                               torch.from_numpy(k).to(ctx.device)))


def jax_qk(ctx: BenchContext, seq: int) -> tuple[Any, Any]:
    import jax.numpy as jnp

    q, k = np_qk(ctx, seq)
    return ctx.memo(("jax", seq), lambda: (jnp.asarray(q), jnp.asarray(k)))


def tf_qk(ctx: BenchContext, seq: int) -> tuple[Any, Any]:
    import tensorflow as tf

    q, k = np_qk(ctx, seq)
    return ctx.memo(("tf", seq), lambda: (tf.constant(q), tf.constant(k)))


def torch_positions(ctx: BenchContext, start: int, seq: int) -> Any:
    import torch

    return ctx.memo(("pos", start, seq),
                    lambda: torch.arange(start, start + seq, device=ctx.device))
