"""Eager JAX and TensorFlow calls run the rotary phases and the rotation as one compiled call
each (posenc.backends.<framework>.native): the results agree with the same call inside the
user's jax.jit / tf.function (XLA fuses the whole program there, so the last bit may differ, as
it did before eager calls were compiled), a new position never retraces them, and the user's
own trace still inlines the array-API code (no nested compiled call of posenc's)."""

from __future__ import annotations

import numpy as np
import pytest

import posenc

X = np.random.default_rng(3).standard_normal((1, 4, 3, 16)).astype(np.float32)
POSITIONS = [np.array([0, 1, 2]), np.array([4096, 4097, 4098]), np.array([2**20, 7, 2**24])]
CONFIGS = [{"base": 500000.0}, {"layout": "interleaved", "rotary_dim": 8},
           {"scaling": {"rope_type": "yarn", "factor": 4.0,
                        "original_max_position_embeddings": 4096}}]


@pytest.mark.parametrize("config", CONFIGS, ids=["half", "interleaved-partial", "yarn"])
def test_jax_eager_agrees_with_jit(config: dict) -> None:
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    from posenc.backends.jax import native as jax_native

    jitted = jax.jit(lambda x, p: posenc.rope(x, p, **config))
    x = jnp.asarray(X)
    posenc.rope(x, jnp.asarray(POSITIONS[0], dtype=jnp.int32), **config)
    compiled = jax_native._limb_phases._cache_size()
    for positions in POSITIONS:
        p = jnp.asarray(positions, dtype=jnp.int32)
        eager = np.asarray(posenc.rope(x, p, **config))
        np.testing.assert_allclose(eager, np.asarray(jitted(x, p)), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(eager, posenc.rope(X.astype(np.float64), positions, **config),
                                   atol=3e-6)
    assert jax_native._limb_phases._cache_size() == compiled  # new positions, no compilation
    traced = str(jax.make_jaxpr(lambda x, p: posenc.rope(x, p, **config))(x, p))
    assert "_limb_phases" not in traced and "name=_rotate" not in traced


@pytest.mark.parametrize("config", CONFIGS, ids=["half", "interleaved-partial", "yarn"])
def test_tensorflow_eager_agrees_with_tf_function(config: dict) -> None:
    tf = pytest.importorskip("tensorflow")
    from posenc.backends.tensorflow import native as tf_native

    graph = tf.function(lambda x, p: posenc.rope(x, p, **config))
    x = tf.constant(X)
    posenc.rope(x, tf.constant(POSITIONS[0], dtype=tf.int32), **config)
    graphs = tf_native._phases_graph.cache_info().currsize
    for positions in POSITIONS:
        p = tf.constant(positions, dtype=tf.int32)
        eager = posenc.rope(x, p, **config).numpy()
        np.testing.assert_allclose(eager, graph(x, p).numpy(), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(eager, posenc.rope(X.astype(np.float64), positions, **config),
                                   atol=3e-6)
    assert tf_native._phases_graph.cache_info().currsize == graphs  # no new graph


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_tensorflow_eager_graphs_are_one_per_signature(layout: str) -> None:
    """The eager phases and rotation are one concrete graph function per layout, dtype and
    ranks: new widths, sequence lengths, batch sizes and positions build no new graph."""
    tf = pytest.importorskip("tensorflow")
    from posenc.backends.tensorflow import native as tf_native

    rng = np.random.default_rng(5)
    sizes = None
    for batch, length, width in [(1, 1, 16), (2, 7, 16), (1, 300, 32), (3, 1, 8)]:
        x = rng.standard_normal((batch, 4, length, width)).astype(np.float32)
        positions = np.arange(4000, 4000 + length)
        got = posenc.rope(tf.constant(x), tf.constant(positions), layout=layout).numpy()
        np.testing.assert_allclose(got, posenc.rope(x.astype(np.float64), positions,
                                                    layout=layout), atol=3e-6)
        now = (tf_native._rotation.cache_info().currsize,
               tf_native._phases_graph.cache_info().currsize)
        assert sizes is None or now == sizes
        sizes = now
