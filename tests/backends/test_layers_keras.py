"""The Keras layers (posenc.backends.tensorflow.<Layer>): each computes exactly its encoding
function with its weights, round-trips through get_config and .keras files, and trains inside a
model compiled with jit_compile=True."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from posenc.errors import ParameterError
from posenc.layers import all_layers

from ..layer_configs import SMALL, call, named_call

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
pe = pytest.importorskip("posenc.backends.tensorflow")

NAMES = sorted(all_layers())


@pytest.mark.parametrize("name", NAMES)
def test_call_equals_the_function_and_config_round_trips(name: str) -> None:
    layer = all_layers()[name]
    built = getattr(pe, name)(**SMALL[name])
    assert isinstance(built, keras.layers.Layer)
    config = built.posenc_config
    shapes = layer.weight_shapes(config)
    assert {v.path.split("/")[-1]: tuple(v.shape) for v in built.trainable_weights} == shapes
    args, kwargs = call(name)
    out = built(*args, **kwargs)
    weights = {v.path.split("/")[-1]: v.numpy() for v in built.weights}
    extra = {"dtype": "float32"} if "dtype" in name_params(layer) else {}
    expected = getattr(pe, layer.function)(**named_call(name), **weights,
                                           **layer.function_kwargs(config), **extra)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-6, atol=1e-6)

    again = type(built).from_config(built.get_config())
    assert again.get_config() == built.get_config()
    assert [tuple(v.shape) for v in again.weights] == [tuple(v.shape) for v in built.weights]


def name_params(layer) -> set[str]:
    import inspect

    return set(inspect.signature(layer.implementation()).parameters)


def test_dtype_policy_and_optional_weights() -> None:
    assert pe.ALiBiBias(num_heads=2)(3, 3).dtype == tf.float32
    assert pe.ALiBiBias(num_heads=2, dtype="float64")(3, 3).dtype == tf.float64
    assert pe.SinusoidalPositionEmbedding(dim=4, dtype="bfloat16")(np.arange(3)).dtype \
        == tf.bfloat16
    assert [v.name for v in pe.ConvPositionEncoding(channels=4, use_bias=False).weights] \
        == ["kernel"]
    assert pe.TUPEScores(untie_cls=False).weights == []
    transition = pe.RecurrentPositionEmbedding(dim=3).weights[1]
    np.testing.assert_array_equal(transition.numpy(), np.eye(3))


def test_attention_mask_is_an_argument_and_sequence_masks_pass_through_rotations() -> None:
    import warnings

    attention = pe.ShawRelativeAttention(head_dim=4, max_relative_position=2)
    q = np.ones((2, 3, 4), np.float32)
    mask = np.tril(np.ones((3, 3), bool))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Keras warns when it takes mask= for a sequence mask
        out = attention(q, q, q, mask=mask)
    expected = pe.shaw_attention(q, q, q, attention.weights[0].numpy(), max_relative_position=2,
                                 mask=mask)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-6)
    tokens = keras.layers.Embedding(10, 8, mask_zero=True)(np.array([[1, 2, 0, 0]]))
    rotated = pe.RotaryEmbedding()(tokens)
    np.testing.assert_array_equal(rotated._keras_mask.numpy(), [[True, True, False, False]])


def test_bad_arguments_raise_parameter_errors() -> None:
    with pytest.raises(ParameterError, match="num_head"):
        pe.T5RelativeBias(num_head=2)
    with pytest.raises(ParameterError, match="num_heads"):
        pe.T5RelativeBias()


def test_compiled_call_follows_weight_changes_without_retracing() -> None:
    bias = pe.T5RelativeBias(**SMALL["T5RelativeBias"])
    traces = []

    def forward() -> tf.Tensor:
        traces.append(1)
        return bias(3, 4)

    fn = tf.function(forward, jit_compile=True, autograph=False)
    first = fn().numpy()
    bias.weights[0].assign(bias.weights[0] + 1.0)
    np.testing.assert_allclose(fn().numpy(), first + 1.0, rtol=1e-6)
    assert len(traces) == 1


@keras.saving.register_keras_serializable(package="posenc_tests")
class TinyAttention(keras.Model):
    """One attention layer with a learned absolute table and a T5 bias (fixed length 4)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.embedding = pe.LearnedPositionEmbedding(num_positions=4, dim=8)
        self.bias = pe.T5RelativeBias(num_heads=1, num_buckets=8, max_distance=16)
        self.head = keras.layers.Dense(1)

    def call(self, x):
        h = x + self.embedding(np.arange(4))
        scores = keras.ops.matmul(h, keras.ops.transpose(h, (0, 2, 1))) + self.bias(4, 4)[0]
        return self.head(keras.ops.matmul(keras.ops.softmax(scores), h))


def test_model_with_jit_compile_trains_and_saves(tmp_path: Path) -> None:
    keras.utils.set_random_seed(0)
    model = TinyAttention()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile=True)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 4, 8)).astype(np.float32)
    y = rng.standard_normal((8, 4, 1)).astype(np.float32)
    model(x[:1])
    before = [v.numpy() for v in (*model.embedding.weights, *model.bias.weights)]
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    after = [v.numpy() for v in (*model.embedding.weights, *model.bias.weights)]
    assert all(not np.allclose(a, b) for a, b in zip(after, before, strict=True))
    predicted = model.predict(x, verbose=0)

    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded.bias) is type(model.bias)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), predicted)


def test_functional_model_with_an_unknown_batch_size() -> None:
    """keras.Input leaves the batch dimension unknown (None) while the model is traced."""
    positions = keras.Input(shape=(5,), dtype="int64")
    model = keras.Model(positions, pe.LearnedPositionEmbedding(num_positions=8, dim=4)(positions))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile=True)
    x = np.tile(np.arange(5), (3, 1))
    table = model.layers[-1].weights[0].numpy()
    np.testing.assert_array_equal(model.predict(x, verbose=0), table[x])
    model.fit(x, np.zeros((3, 5, 4), np.float32), epochs=1, verbose=0)
    assert not np.allclose(model.layers[-1].weights[0].numpy(), table)


def test_layer_classes_import_keras_lazily() -> None:
    assert "T5RelativeBias" in dir(pe) and "rope" in dir(pe)
    with pytest.raises(AttributeError):
        pe.NoSuchLayer  # noqa: B018
    code = ("import sys, posenc.backends.tensorflow as pe; pe.rope; dir(pe); "
            "assert 'keras' not in sys.modules and 'tensorflow' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
