"""Memory for in-place and ``out=`` rotation: whether two torch tensors share it, and fresh
results that fault few pages."""

from __future__ import annotations

import ctypes
import functools
import sys
from typing import Any

import torch

__all__ = ["empty_for_writing", "may_overlap", "same_view"]


def same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a is b:
        return True
    if torch.compiler.is_compiling():
        return False
    return (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride())


def may_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors may share memory: their extents in one storage intersect, unless
    they are provably disjoint slices of one tensor (q and k views of a fused qkv tensor).
    Under torch.compile (no storages; it handles aliasing itself): False."""
    if torch.compiler.is_compiling() or a.numel() == 0 or b.numel() == 0:
        return False
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    (a0, a1), (b0, b1) = _extent(a), _extent(b)
    return a0 < b1 and b0 < a1 and not _disjoint_slices(a, b)


def _extent(t: torch.Tensor) -> tuple[int, int]:
    low = high = t.storage_offset()
    for size, stride in zip(t.shape, t.stride(), strict=True):
        reach = (size - 1) * stride
        low, high = (low + reach, high) if reach < 0 else (low, high + reach)
    return low, high + 1


def _disjoint_slices(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same strides, nested (each larger than the span of the smaller ones, so an offset has
    one decomposition), and offsets that differ by m strides along one dim whose index
    ranges do not meet: no element in common."""
    if a.ndim != b.ndim or a.stride() != b.stride() or min(a.stride(), default=0) <= 0:
        return False
    dims = sorted(range(a.ndim), key=lambda d: a.stride(d))
    span = 0
    for d in dims:
        if a.stride(d) <= span:
            return False
        span += (max(a.shape[d], b.shape[d]) - 1) * a.stride(d)
    delta = b.storage_offset() - a.storage_offset()
    for d in reversed(dims):  # the digits of delta, largest stride first
        m, delta = divmod(delta, a.stride(d)) if delta >= 0 else (-((-delta) // a.stride(d)),
                                                                  -((-delta) % a.stride(d)))
        if m >= a.shape[d] or -m >= b.shape[d]:
            return True  # b starts beyond a (or a beyond b) along d
        if m != 0:
            return False
    return False


# glibc's largest mmap threshold: a CPU tensor from this size on is a mapping of its own,
# unmapped when freed, so advice given to its pages goes with it
_OWN_MAPPING_BYTES = 32 << 20
_HUGE_PAGE = 2 << 20
_MADV_HUGEPAGE = 14


def empty_for_writing(shape: tuple[int, ...], dtype: torch.dtype, device: Any) -> torch.Tensor:
    """``torch.empty`` for a result about to be written in full. On Linux CPU, a tensor of
    its own mapping is advised ``MADV_HUGEPAGE`` before its first touch: its first writes
    then fault 2 MiB pages instead of 4 KiB ones (what ``THP_MEM_ALLOC_ENABLE=1`` does for
    every allocation, here for this tensor only). Nothing else in the process changes."""
    out = torch.empty(shape, dtype=dtype, device=device)
    nbytes = out.numel() * out.element_size()
    if out.device.type == "cpu" and nbytes >= _OWN_MAPPING_BYTES and _libc() is not None:
        start = -(-out.data_ptr() // _HUGE_PAGE) * _HUGE_PAGE
        stop = (out.data_ptr() + nbytes) // _HUGE_PAGE * _HUGE_PAGE
        if stop > start:  # advice only: a kernel without transparent huge pages ignores it
            _libc().madvise(ctypes.c_void_p(start), ctypes.c_size_t(stop - start),
                            _MADV_HUGEPAGE)
    return out


@functools.cache
def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        return libc
    except (OSError, AttributeError):
        return None
