"""PyTorch backend: ``from posenc.backends import torch as pe`` (``pip install 'posenc[torch]'``)."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator, Mapping
from types import ModuleType
from typing import Any

import numpy as np

from ..backend import Backend
from ..convenience import bind_module


def _torch() -> ModuleType:
    import torch

    from . import native  # noqa: F401  (registers torch's fast paths with the core)

    return torch


def _load() -> ModuleType:
    _torch()
    import array_api_compat.torch as xp

    return xp


def _to_numpy(x: Any) -> np.ndarray:
    x = x.detach().to("cpu")
    if x.dtype.is_floating_point and x.dtype.itemsize < 4:  # NumPy has no bfloat16
        x = x.to(_torch().float64)
    return x.numpy().copy()


def _from_numpy(array: np.ndarray, dtype: str, device: Any) -> Any:
    torch = _torch()
    return torch.from_numpy(np.array(array, copy=True)).to(
        device=device or "cpu", dtype=getattr(torch, dtype))


def _torch_device(name: str) -> Any:
    return _torch().device(name)


def _devices() -> list[str]:
    return ["cpu", *(["cuda"] if _torch().cuda.is_available() else [])]


def _compile(fn: Callable[..., Any]) -> Callable[..., Any]:
    return _torch().compile(fn, fullgraph=True)


@contextlib.contextmanager
def _session() -> Iterator[None]:
    # The harness compiles many small graphs; the default recompile limit (8) would make
    # torch.compile fail. Patched for the harness run only.
    import warnings

    import torch._dynamo

    with (torch._dynamo.config.patch(cache_size_limit=1024, accumulated_cache_size_limit=4096),
          warnings.catch_warnings(), _inductor_cache()):
        # array-api-compat's type checks use lru_cache, which dynamo traces through (harmless)
        warnings.filterwarnings("ignore", message=".*functools.lru_cache.*")
        yield


@contextlib.contextmanager
def _inductor_cache() -> Iterator[None]:
    """Inductor's on-disk caches (FX graphs, autotuning) under posenc's cache folder for the
    harness run, so a second run compiles nothing it compiled before; the previous folder
    comes back afterwards. (Inductor writes its default folder into
    ``TORCHINDUCTOR_CACHE_DIR`` on first use, so a caller's own choice cannot be told from
    it: ``--no-compile-cache`` leaves Inductor's settings alone.) Inductor keys entries by
    graph, inputs and versions and recompiles on a miss or an unreadable entry."""
    from posenc.paths import compile_cache_dir

    folder = compile_cache_dir("inductor")
    if folder is None:
        yield
        return
    try:  # clears Inductor's in-memory caches on entry and exit, as the folder changes
        from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir
    except ImportError:
        yield
        return
    with temporary_cache_dir(str(folder)):
        yield


@contextlib.contextmanager
def _settings(dtype: str, own: bool, asked: Mapping[str, str]) -> Iterator[str]:
    """PyTorch's float32 matmul precision as the caller has it, unless the run asks for one."""
    torch = _torch()
    before = torch.get_float32_matmul_precision()
    if "matmul_precision" in asked:
        torch.set_float32_matmul_precision(asked["matmul_precision"])
    why = "asked" if "matmul_precision" in asked else "the caller's"
    try:
        yield f"torch: float32 matmul precision {torch.get_float32_matmul_precision()} ({why})"
    finally:
        torch.set_float32_matmul_precision(before)


def _vjp(fn: Callable[..., Any], arrays: list[Any], wrt: list[int], cotangent: Any) -> list[Any]:
    torch = _torch()
    leaves = [a.detach().clone().requires_grad_(True) if i in wrt else a
              for i, a in enumerate(arrays)]
    out = fn(*leaves)
    if isinstance(out, tuple | list):  # as golden.output_array: same shapes stacked, else flat
        device = next((p.device for p in out if isinstance(p, torch.Tensor)), None)
        parts = [torch.as_tensor(p, dtype=torch.float64, device=device)
                 if isinstance(p, int | float) else p for p in out]
        out = (torch.stack(parts) if len({p.shape for p in parts}) == 1
               else torch.cat([p.reshape(-1) for p in parts]))
    if not out.requires_grad:  # computed outside autograd: every gradient is zero
        return [torch.zeros_like(leaves[i]) for i in wrt]
    grads = torch.autograd.grad(out, [leaves[i] for i in wrt], grad_outputs=cotangent,
                                allow_unused=True)
    return [torch.zeros_like(leaves[i]) if g is None else g for i, g in zip(wrt, grads,
                                                                           strict=True)]


BACKEND = Backend(
    name="torch", load=_load, to_numpy=_to_numpy, from_numpy=_from_numpy,
    dtypes=("float64", "float32", "bfloat16", "float16"), devices=_devices,
    device_object=_torch_device, compile=_compile, session=_session, settings=_settings,
    vjp=_vjp,
    requires="torch", extra="torch")


def _flex(name: str) -> Callable[[], Any]:  # FlexAttention score_mods: pe.t5_score_mod(...)
    return lambda: getattr(importlib.import_module("posenc.backends.torch.flex"), name)


__getattr__, __dir__ = bind_module(
    BACKEND, layers="posenc.backends.torch.layers", layer_backend="torch-layers",
    extras={n: _flex(n) for n in ("alibi_score_mod", "t5_score_mod", "kerple_score_mod",
                                  "causal_mask_mod")})
