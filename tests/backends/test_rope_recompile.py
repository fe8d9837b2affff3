"""Positions are data: a new decoding offset, or LongRoPE switching to its long factors, never
retraces a jitted rotary call (JAX, torch.compile, tf.function)."""

from __future__ import annotations

import numpy as np
import pytest

import posenc

LONGROPE = {"type": "longrope", "short_factor": [1.0, 1.5, 2.0, 3.0],
            "long_factor": [2.0, 4.0, 8.0, 16.0], "original_max_position_embeddings": 4096,
            "factor": 16.0}
OFFSETS = [0, 1, 4095, 4096, 100_000, 2**20]


def _expected(x: np.ndarray, offset: int, **kw) -> np.ndarray:
    return posenc.rope(x, np.array([offset]), **kw)


@pytest.mark.parametrize("scaling", [None, LONGROPE], ids=["default", "longrope"])
def test_jax_jit_traces_once(scaling) -> None:
    jax = pytest.importorskip("jax")
    traces = []

    @jax.jit
    def step(x, positions):
        traces.append(1)
        return posenc.rope(x, positions, scaling=scaling)

    x = np.random.default_rng(0).standard_normal((2, 1, 8)).astype(np.float32)
    for offset in OFFSETS:
        got = np.asarray(step(x, np.array([offset], np.int32)))
        np.testing.assert_allclose(got, _expected(x, offset, scaling=scaling), atol=2e-6)
    assert len(traces) == 1


@pytest.mark.parametrize("scaling", [None, LONGROPE], ids=["default", "longrope"])
def test_torch_compile_compiles_once(scaling) -> None:
    torch = pytest.importorskip("torch")
    compiles = []

    def backend(gm, example_inputs):
        compiles.append(1)
        return gm.forward

    step = torch.compile(lambda x, p: posenc.rope(x, p, scaling=scaling), backend=backend,
                         fullgraph=True, dynamic=False)
    x = np.random.default_rng(0).standard_normal((2, 1, 8)).astype(np.float32)
    for offset in OFFSETS:
        got = step(torch.from_numpy(x), torch.tensor([offset])).numpy()
        np.testing.assert_allclose(got, _expected(x, offset, scaling=scaling), atol=2e-6)
    assert len(compiles) == 1


def test_tf_function_traces_once() -> None:
    tf = pytest.importorskip("tensorflow")
    traces = []

    @tf.function(jit_compile=True, autograph=False)
    def step(x, positions):
        traces.append(1)
        return posenc.rope(x, positions, scaling=LONGROPE)

    x = np.random.default_rng(0).standard_normal((2, 1, 8)).astype(np.float32)
    for offset in OFFSETS:
        got = step(tf.constant(x), tf.constant([offset], tf.int64)).numpy()
        np.testing.assert_allclose(got, _expected(x, offset, scaling=LONGROPE), atol=2e-6)
    assert len(traces) == 1
