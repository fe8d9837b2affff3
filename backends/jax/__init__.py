"""JAX backend: ``from posenc.backends import jax as pe`` (``pip install 'posenc[jax]'``).

posenc never enables JAX's 64-bit mode for you: without it, float64 requests give float32
as JAX always does. The conformance harness enables it around float64 checks only (scoped
with ``jax.enable_x64``), so float64 goldens can be checked; float32, bfloat16 and float16
checks run under the caller's settings, as the code's users run it. On GPUs, where JAX's
default float32 matmul is TF32, the harness pins ``jax.default_matmul_precision("highest")``
around checks of posenc's own code only; someone else's code runs at the caller's precision
unless the run asks for one (``Options.settings``, ``--matmul-precision``).
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
    import jax.numpy as jnp

    from . import native  # noqa: F401  (registers JAX's special cases with the core)

    return jnp


def _to_numpy(x: Any) -> np.ndarray:
    out = np.asarray(x)
    if out.dtype.kind == "V" or out.dtype.name in ("bfloat16", "float16"):
        out = out.astype(np.float64)
    return np.array(out, copy=True)


def _device(name: Any) -> Any:
    import jax

    if name in (None, "cpu"):
        return jax.devices("cpu")[0]
    if name in ("cuda", "gpu"):
        return jax.devices("gpu")[0]
    return name


_NARROW = {"float64": "float32", "int64": "int32", "uint64": "uint32", "complex128": "complex64"}


def _from_numpy(array: np.ndarray, dtype: str, device: Any) -> Any:
    import jax
    import jax.numpy as jnp

    if not jax.config.jax_enable_x64:  # what JAX does anyway, minus the warning
        dtype = _NARROW.get(dtype, dtype)
    return jax.device_put(jnp.asarray(array, dtype=getattr(jnp, dtype)), _device(device))


def _devices() -> list[str]:
    import jax

    try:
        has_gpu = bool(jax.devices("gpu"))
    except RuntimeError:
        has_gpu = False
    return ["cpu", *(["cuda"] if has_gpu else [])]


def _compile(fn: Callable[..., Any]) -> Callable[..., Any]:
    import jax

    return jax.jit(fn)


@contextlib.contextmanager
def _session() -> Iterator[None]:
    import jax

    with _compilation_cache(jax):
        yield


@contextlib.contextmanager
def _settings(dtype: str, own: bool, asked: Mapping[str, str]) -> Iterator[str]:
    """64-bit mode for float64 checks only (JAX has no float64 without it); other checks run
    at the caller's setting. On GPUs JAX multiplies float32 matrices in TF32 by default
    (~1e-3 errors in attention scores and matrix powers): posenc's own code is checked at
    "highest", someone else's at the caller's precision unless ``asked`` names one."""
    import jax

    precision = asked.get("matmul_precision") or ("highest" if own else None)
    with contextlib.ExitStack() as stack:
        if dtype == "float64":
            stack.enter_context(jax.enable_x64(True))
        if precision is not None:
            stack.enter_context(jax.default_matmul_precision(precision))
        x64 = "on" if jax.config.jax_enable_x64 else "off"
        x64 += " (float64 needs it)" if dtype == "float64" else " (the caller's)"
        why = ("asked" if "matmul_precision" in asked else "posenc's own code") \
            if precision is not None else "the caller's"
        yield (f"jax, {dtype} checks: 64-bit mode {x64}, matmul precision "
               f"{jax.config.jax_default_matmul_precision or 'default'} ({why})")


@contextlib.contextmanager
def _compilation_cache(jax: Any) -> Iterator[None]:
    """JAX's persistent compilation cache under posenc's cache folder, for the harness run
    only (every compile cached, however small: the harness makes thousands); the caller's
    settings come back afterwards. JAX keys entries by computation, backend and versions,
    and compiles afresh when an entry is missing or cannot be read."""
    from posenc.paths import compile_cache_dir

    folder = compile_cache_dir("jax")
    if folder is None or jax.config.jax_compilation_cache_dir:  # the caller's own cache wins
        yield
        return
    names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
             "jax_persistent_cache_min_entry_size_bytes")
    before = {name: getattr(jax.config, name) for name in names}
    for name, value in zip(names, (str(folder), 0.0, 0), strict=True):
        jax.config.update(name, value)
    try:
        yield
    finally:
        for name, value in before.items():
            jax.config.update(name, value)
        _reset_cache()


def _reset_cache() -> None:
    """Drop JAX's handle on the cache folder, so later compiles of the caller's follow the
    caller's settings (a private function: absent in some versions, then nothing to do)."""
    try:
        from jax._src import compilation_cache
    except ImportError:
        return
    reset = getattr(compilation_cache, "reset_cache", None)
    if reset is not None:
        reset()


def _vjp(fn: Callable[..., Any], arrays: list[Any], wrt: list[int], cotangent: Any) -> list[Any]:
    import jax
    import jax.numpy as jnp

    def partial(*chosen: Any) -> Any:
        full = list(arrays)
        for i, value in zip(wrt, chosen, strict=True):
            full[i] = value
        out = fn(*full)
        if not isinstance(out, tuple | list):
            return out
        parts = [jnp.asarray(p) for p in out]  # as golden.output_array
        if len({p.shape for p in parts}) == 1:
            return jnp.stack(parts)
        return jnp.concatenate([jnp.ravel(p) for p in parts])

    _, pullback = jax.vjp(partial, *[arrays[i] for i in wrt])
    return list(pullback(cotangent))


BACKEND = Backend(
    name="jax", load=_load, to_numpy=_to_numpy, from_numpy=_from_numpy,
    dtypes=("float64", "float32", "bfloat16", "float16"), devices=_devices, device_object=_device,
    compile=_compile, session=_session, settings=_settings, vjp=_vjp, requires="jax",
    extra="jax")


def _nnx() -> Any:
    from .layers import nnx_module

    return nnx_module()


# pe.<Layer>: frozen descriptions with init/apply; pe.nnx.<Layer>: Flax NNX modules
__getattr__, __dir__ = bind_module(BACKEND, layers="posenc.backends.jax.layers",
                                   layer_backend="jax-layers", extras={"nnx": _nnx})
