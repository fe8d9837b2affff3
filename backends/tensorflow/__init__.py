"""TensorFlow backend through posenc's array-API adapter (``pip install 'posenc[tensorflow]'``).

Import torch before TensorFlow when a process uses both (the other order has crashed).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from types import ModuleType
from typing import Any

import numpy as np

from ..backend import Backend
from ..convenience import bind_module


def _load() -> ModuleType:
    from . import array_api, native  # noqa: F401  (native registers TF's special cases)

    return array_api


def _tf() -> ModuleType:
    import tensorflow as tf

    return tf


def _device(name: Any) -> str:
    return {None: "/CPU:0", "cpu": "/CPU:0", "cuda": "/GPU:0", "gpu": "/GPU:0"}.get(name, name)


def _to_numpy(x: Any) -> np.ndarray:
    tf = _tf()
    if x.dtype.is_floating and x.dtype.size < 4:
        x = tf.cast(x, tf.float64)
    return np.array(x.numpy(), copy=True)


def _from_numpy(array: np.ndarray, dtype: str, device: Any) -> Any:
    tf = _tf()
    with tf.device(_device(device)):
        return tf.identity(tf.constant(array, dtype=getattr(tf, dtype)))


def _devices() -> list[str]:
    return ["cpu", *(["cuda"] if _tf().config.list_physical_devices("GPU") else [])]


def _compile(fn: Callable[..., Any]) -> Callable[..., Any]:
    tf = _tf()

    def traced(*args: Any, **kwargs: Any) -> Any:
        # a Python float in a tuple result (an attention or softmax factor, a host constant)
        # would leave the graph as a float32 tensor; keep it float64, as it is in eager mode
        out = fn(*args, **kwargs)
        if isinstance(out, tuple | list):
            return type(out)(tf.constant(v, tf.float64) if isinstance(v, float) else v
                             for v in out)
        return out

    # autograph=False: the implementations have no tensor-dependent Python control flow to convert
    return tf.function(traced, jit_compile=True, autograph=False)


@contextlib.contextmanager
def _session() -> Iterator[None]:
    tf = _tf()
    for gpu in tf.config.list_physical_devices("GPU"):  # don't reserve all GPU memory
        with contextlib.suppress(RuntimeError):  # already initialised
            tf.config.experimental.set_memory_growth(gpu, True)
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("ERROR")  # the harness retraces on purpose: one graph per case shape
    try:
        yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def _settings(dtype: str, own: bool, asked: Mapping[str, str]) -> Iterator[str]:
    """TensorFlow's TF32 execution (on by default: float32 matmuls on Ampere+ GPUs in TF32) as
    the caller has it, unless the run asks: "highest" turns it off, "high" on."""
    tf = _tf()
    before = tf.config.experimental.tensor_float_32_execution_enabled()
    if "matmul_precision" in asked:
        tf.config.experimental.enable_tensor_float_32_execution(
            asked["matmul_precision"] != "highest")
    on = "on" if tf.config.experimental.tensor_float_32_execution_enabled() else "off"
    why = "asked" if "matmul_precision" in asked else "the caller's"
    try:
        yield f"tensorflow: TF32 execution {on} ({why})"
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(before)


def _vjp(fn: Callable[..., Any], arrays: list[Any], wrt: list[int], cotangent: Any) -> list[Any]:
    import tensorflow as tf

    with tf.GradientTape() as tape:
        for i in wrt:
            tape.watch(arrays[i])
        out = fn(*arrays)
        if isinstance(out, tuple | list):  # as golden.output_array
            parts = [tf.convert_to_tensor(p, dtype=tf.float64) if isinstance(p, int | float)
                     else p for p in out]
            out = (tf.stack(parts) if len({tuple(p.shape) for p in parts}) == 1
                   else tf.concat([tf.reshape(p, [-1]) for p in parts], 0))
    grads = tape.gradient(out, [arrays[i] for i in wrt], output_gradients=cotangent)
    # a gather's gradient comes back as IndexedSlices: densify
    return [tf.zeros_like(arrays[i]) if g is None else tf.convert_to_tensor(g)
            for i, g in zip(wrt, grads, strict=True)]


BACKEND = Backend(
    name="tensorflow", load=_load, to_numpy=_to_numpy, from_numpy=_from_numpy,
    dtypes=("float64", "float32", "bfloat16", "float16"), devices=_devices, device_object=_device,
    compile=_compile, session=_session, settings=_settings, vjp=_vjp,
    requires="tensorflow", extra="tensorflow")

# pe.<Layer>: Keras layers (Keras is imported on first use)
__getattr__, __dir__ = bind_module(BACKEND, layers="posenc.backends.keras_layers",
                                   layer_backend="keras-layers")
