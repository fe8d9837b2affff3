"""The JAX layers (posenc.backends.jax.<Layer>: init/apply over a parameter pytree, and Flax NNX
modules): each computes exactly its encoding function with its weights."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys

import numpy as np
import pytest

from posenc.errors import ParameterError
from posenc.layers import all_layers

from ..layer_configs import SMALL, call, named_call

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
pe = pytest.importorskip("posenc.backends.jax")

NAMES = sorted(all_layers())


def test_every_layer_has_a_small_config() -> None:
    assert set(SMALL) == set(NAMES)


def _direct(name: str, params: dict, description) -> jax.Array:
    layer = all_layers()[name]
    function = getattr(pe, layer.function)  # the convenience function (converts NumPy)
    extra = {"dtype": "float32"} if description.dtype is not None else {}
    return function(**named_call(name), **params, **layer.function_kwargs(description.config),
                    **extra)


@pytest.mark.parametrize("name", NAMES)
def test_apply_equals_the_function_and_has_finite_gradients(name: str) -> None:
    description = getattr(pe, name)(**SMALL[name])
    params = description.init(jax.random.key(1))
    assert set(params) == set(description.weight_shapes)
    assert {k: v.shape for k, v in params.items()} == description.weight_shapes
    assert all(v.dtype == jnp.float32 for v in params.values())
    leaves = jax.tree_util.tree_leaves(params)  # a plain pytree of the weights
    assert len(leaves) == len(all_layers()[name].weight_shapes(description.config))
    args, kwargs = call(name)

    def loss(p: dict) -> jax.Array:
        return jnp.sum(description.apply(p, *args, **kwargs) ** 2)

    @jax.jit  # one compilation per layer: op-by-op eager JAX is slow to warm up
    def run(p: dict) -> tuple:
        return description.apply(p, *args, **kwargs), _direct(name, p, description), \
            jax.grad(loss)(p)

    out, expected, grads = run(params)
    np.testing.assert_allclose(np.asarray(out), np.asarray(expected), rtol=1e-6, atol=1e-6)
    assert set(grads) == set(params)
    for key, g in grads.items():
        assert g.shape == params[key].shape
        assert bool(jnp.all(jnp.isfinite(g))), key


def test_apply_runs_eagerly() -> None:
    bias = pe.T5RelativeBias(**SMALL["T5RelativeBias"])
    params = bias.init(jax.random.key(0))
    out = bias.apply(params, 3, 4)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(_direct("T5RelativeBias", params,
                                                                      bias)))


def test_description_is_frozen_hashable_and_jit_does_not_retrace() -> None:
    bias = pe.T5RelativeBias(num_heads=2, num_buckets=8, max_distance=16)
    same = pe.T5RelativeBias(num_heads=2, num_buckets=8, max_distance=16)
    assert bias == same and hash(bias) == hash(same)
    assert bias != pe.T5RelativeBias(num_heads=3, num_buckets=8, max_distance=16)
    assert bias.num_heads == 2 and bias.config["max_distance"] == 16
    with pytest.raises(AttributeError):
        bias.num_heads = 3
    assert copy.deepcopy(bias) == bias and pickle.loads(pickle.dumps(bias)) == bias
    traces = []

    def forward(params: dict) -> jax.Array:
        traces.append(1)
        return bias.apply(params, 3, 4)

    fn = jax.jit(forward)
    p1, p2 = bias.init(jax.random.key(0)), bias.init(jax.random.key(1))
    out1, out2 = fn(p1), fn(p2)
    assert len(traces) == 1
    assert not np.array_equal(np.asarray(out1), np.asarray(out2))
    np.testing.assert_allclose(np.asarray(out2), np.asarray(bias.apply(p2, 3, 4)), rtol=1e-6)
    # the description itself can be a static argument
    static = jax.jit(lambda d, p: d.apply(p, 3, 4), static_argnums=0)
    np.testing.assert_allclose(np.asarray(static(same, p1)), np.asarray(out1), rtol=1e-6)


def test_optional_weights_and_dtype_layers() -> None:
    assert set(pe.ConvPositionEncoding(channels=4, use_bias=False).init(jax.random.key(0))) \
        == {"kernel"}
    assert set(pe.ShawRelativeAttention(head_dim=4, max_relative_position=2)
               .init(jax.random.key(0))) == {"table_k"}
    assert set(pe.TUPEScores(untie_cls=False).init(jax.random.key(0))) == set()
    recurrent = pe.RecurrentPositionEmbedding(dim=3).init(jax.random.key(0))
    np.testing.assert_array_equal(np.asarray(recurrent["transition"]), np.eye(3))
    assert pe.ALiBiBias(num_heads=2).apply({}, 3, 3).dtype == jnp.float32
    assert pe.ALiBiBias(num_heads=2, dtype="bfloat16").apply({}, 3, 3).dtype == jnp.bfloat16
    assert pe.SinusoidalPositionEmbedding(dim=4, dtype="float16").apply(
        {}, np.arange(3)).dtype == jnp.float16


def test_bad_arguments_raise_parameter_errors() -> None:
    with pytest.raises(ParameterError, match="num_head"):
        pe.T5RelativeBias(num_head=2)
    with pytest.raises(ParameterError, match="num_heads"):
        pe.T5RelativeBias()
    with pytest.raises(ParameterError, match="dtype"):
        pe.T5RelativeBias(num_heads=2, dtype="float16")
    bias = pe.T5RelativeBias(num_heads=2, num_buckets=8, max_distance=16)
    with pytest.raises(ParameterError, match=r"'table' has shape \(3, 3\), expected \(8, 2\)"):
        bias.apply({"table": jnp.zeros((3, 3))}, 3, 4)
    with pytest.raises(ParameterError, match="missing table"):
        bias.apply({}, 3, 4)
    with pytest.raises(ParameterError, match="unexpected bias"):
        bias.apply({"table": jnp.zeros((8, 2)), "bias": jnp.zeros(2)}, 3, 4)


def test_layer_names_resolve_lazily() -> None:
    assert "T5RelativeBias" in dir(pe) and "rope" in dir(pe) and "nnx" in dir(pe)
    with pytest.raises(AttributeError):
        pe.NoSuchLayer  # noqa: B018
    code = ("import sys, posenc.backends.jax as pe; pe.T5RelativeBias; pe.rope; "
            "assert 'flax' not in sys.modules, 'flax imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", ["T5RelativeBias", "ALiBiBias"])
def test_flax_nnx_module(name: str) -> None:
    nnx = pytest.importorskip("flax.nnx")
    module = getattr(pe.nnx, name)(**SMALL[name], rngs=nnx.Rngs(0))
    params = {w.name: getattr(module, w.name)[...] for w in all_layers()[name].weights
              if getattr(module, w.name) is not None}
    assert len(jax.tree_util.tree_leaves(nnx.state(module, nnx.Param))) == len(params)
    args, kwargs = call(name)
    expected = module.description.apply(params, *args, **kwargs)
    out = nnx.jit(lambda m: m(*args, **kwargs))(module)
    np.testing.assert_allclose(np.asarray(out), np.asarray(expected), rtol=1e-6, atol=1e-6)
    if params:
        grads = nnx.grad(lambda m: jnp.sum(m(*args, **kwargs) ** 2))(module)
        assert len(jax.tree_util.tree_leaves(grads)) == len(params)
