"""rotary, compiled: the hand-written jnp rotary and posenc's under jax.jit, keras-hub's layer
on the JAX and TensorFlow backends (worker subprocesses), and posenc's TensorFlow rope (XLA)."""

from __future__ import annotations

from ..inputs import jax_qk, qk_shapes, tf_qk
from ..ours import jax_fns
from ..rivals import keras_rotary, keras_version
from ..rows import BenchCase, BenchContext, PlannedRow, Timing
from ..sizes import BASE, Sizes


def _planned(seq: int) -> list[PlannedRow]:
    def jnp_rotary(ctx: BenchContext) -> Timing:
        import jax.numpy as jnp

        q, k = jax_qk(ctx, seq)
        pos = jnp.arange(seq)
        f = jax_fns(ctx)["jnp"]
        return Timing(lambda: f(q, k, pos), "jax", "x*cos + rotate_half(x)*sin, jax.jit")

    def ours_jax(ctx: BenchContext) -> Timing:
        import jax.numpy as jnp

        q, k = jax_qk(ctx, seq)
        pos = jnp.arange(seq)
        f = jax_fns(ctx)["ours"]
        return Timing(lambda: f(q, k, pos), "jax", "jax.jit, exact phases")

    def keras_jax(ctx: BenchContext) -> Timing:
        import jax

        layer = keras_rotary(ctx)
        q, k = jax_qk(ctx, seq)
        f = jax.jit(lambda q, k: (layer(q), layer(k)))
        return Timing(lambda: f(q, k), "jax", f"{keras_version()}, KERAS_BACKEND=jax, jax.jit")

    def keras_tf(ctx: BenchContext) -> Timing:
        import tensorflow as tf

        layer = keras_rotary(ctx)
        q, k = tf_qk(ctx, seq)
        f = tf.function(lambda q, k: (layer(q), layer(k)), jit_compile=True)
        return Timing(lambda: f(q, k), "tf",
                      f"{keras_version()}, KERAS_BACKEND=tensorflow, tf.function XLA")

    def ours_tf(ctx: BenchContext) -> Timing:
        import tensorflow as tf

        from posenc.backends import tensorflow as ptf

        q, k = tf_qk(ctx, seq)
        pos = tf.range(seq)
        f = tf.function(lambda q, k, pos: (ptf.rope(q, pos, base=BASE), ptf.rope(k, pos, base=BASE)),
                        jit_compile=True, autograph=False)
        return Timing(lambda: f(q, k, pos), "tf", "tf.function(jit_compile=True)")

    p = f"rope/{seq}/xla"
    ref, ours = f"{p}/jnp-rotary", f"{p}/posenc-jax"
    return [
        PlannedRow(ref, "hand-written jnp rotary (jit)", "main", jnp_rotary),
        PlannedRow(ours, "posenc posenc.backends.jax.rope (jit)", "main", ours_jax, ref),
        PlannedRow(f"{p}/keras-hub-jax", "keras-hub RotaryEmbedding, JAX backend (jit)",
                   "keras-jax", keras_jax, ref),
        PlannedRow(f"{p}/keras-hub-tf", "keras-hub RotaryEmbedding, TF backend (XLA)", "tf",
                   keras_tf, ref),
        PlannedRow(f"{p}/posenc-tf", "posenc posenc.backends.tensorflow.rope (XLA)", "tf", ours_tf,
                   ours),
    ]


def case(sizes: Sizes, seq: int) -> BenchCase:
    return BenchCase(f"rope-xla-{seq}", "rope",
                     f"rotary S={seq}, JAX / TensorFlow compiled: {qk_shapes(sizes)}",
                     _planned(seq))
