"""PyTorch's fast paths and special cases for the core (``posenc.native`` plugin ``torch``)."""

from __future__ import annotations

import functools
import math
import sys
from types import ModuleType
from typing import Any

import torch

from posenc import native
from posenc.array_api import FLOAT32_EXACT_INTEGERS, FLOAT64_EXACT_INTEGERS, check_position_range
from posenc.rotary import turn_limbs

from .memory import same_view

# Eager torch on these devices computes float32 phases in float64 turns: six ops where the
# limbs take thirty, for the same ~4e-7 (MPS has no float64; compiled graphs keep the limbs,
# which Inductor fuses into one kernel anyway)
FLOAT64_DEVICES = ("cpu", "cuda")


def phases64(positions: Any, inv_freq: tuple[float, ...], compute: Any) -> Any:
    """Angles reduced to ``[-pi, pi]`` from float64 turns ``p * f`` (``p`` exact in float64,
    the product within 2^-53 relative, so within ~2^-29 turn up to |p| = 2^24), rounded once
    to ``compute``."""
    return phases_from_turns(positions, _turns64(inv_freq, positions.device), compute)


def phases_from_turns(positions: Any, turns_per_position: Any, compute: Any) -> Any:
    """:func:`phases64` with the float64 frequencies in turns already on the device."""
    turns = positions.to(torch.float64) * turns_per_position
    return ((turns - torch.round(turns)) * (2.0 * math.pi)).to(compute)


def turns64(inv_freq: tuple[float, ...], device: Any) -> Any:
    """``inv_freq / (2 pi)`` as a float64 tensor on ``device`` (cached per device)."""
    return _turns64(inv_freq, device)


@functools.lru_cache(maxsize=64)
def _turns64(inv_freq: tuple[float, ...], device: Any) -> Any:
    """``inv_freq / (2 pi)`` as a float64 tensor, made once per device (outside inference
    mode, like the limbs)."""
    with torch.inference_mode(False):
        return torch.tensor([f / (2.0 * math.pi) for f in inv_freq], dtype=torch.float64,
                            device=device)


@functools.lru_cache(maxsize=64)
def _limbs(inv_freq: tuple[float, ...], compute: Any, device: Any) -> Any:
    """The limbs as a tensor, made once per dtype and device for eager calls (outside
    inference mode: autograd could not save an inference tensor later)."""
    with torch.inference_mode(False):
        return torch.asarray(turn_limbs(inv_freq), dtype=compute, device=device)


class TorchNative(native.Native):
    library = "torch"

    def array_types(self) -> tuple[type, ...]:
        return (torch.Tensor,)  # also subclasses (nn.Parameter), whose __module__ dynamo cannot trace

    def namespace(self) -> ModuleType:
        import array_api_compat.torch as xp

        return xp

    def device_of(self, x: Any) -> Any:
        return x.device  # direct: array-api-compat's helper warns under torch.compile

    def is_traced(self, x: Any) -> bool:
        # vmap's batched tensors have no values to read on the host, like a trace's
        return bool(torch.compiler.is_compiling()) or type(x).__name__ == "FakeTensor" \
            or _is_batched(x)

    def compiling(self) -> bool:
        return bool(torch.compiler.is_compiling())

    def assert_position_range(self, positions: Any, *, compute: Any, name: str,
                              low: int | None, high: int | None) -> bool:
        """``torch._assert_async`` over the conditions: on CUDA the host never waits, and a
        violation is a device-side assert naming the parameter; on CPU the assert fails at
        once and the host check then raises the error naming the value."""
        floating = positions.dtype.is_floating_point
        limit = {torch.float32: FLOAT32_EXACT_INTEGERS,
                 torch.float64: FLOAT64_EXACT_INTEGERS}.get(compute)
        widest = math.inf if floating else int(torch.iinfo(positions.dtype).max)
        conditions = [torch.isfinite(positions)] if floating else []
        if low is not None:
            conditions.append(positions >= low)
        if high is not None:
            conditions.append(positions < high)
        if limit is not None and widest > limit:  # narrow integers cannot leave the exact range
            conditions.append(positions.abs() <= limit)
        if not conditions:
            return True
        ok = conditions[0]
        for condition in conditions[1:]:
            ok = ok & condition
        try:
            torch._assert_async(ok.all(), f"{name} outside its valid range")
        except RuntimeError:
            xp = self.namespace()
            check_position_range(xp, positions, compute=compute, name=name, low=low, high=high)
            raise
        return True

    def rotary_phases(self, positions: Any, inv_freq: tuple[float, ...], compute: Any,
                      device: Any) -> Any | None:
        if torch.compiler.is_compiling() or positions.device.type not in FLOAT64_DEVICES:
            return None
        return phases64(positions, inv_freq, compute)

    def rotary_limbs(self, inv_freq: tuple[float, ...], compute: Any, device: Any) -> Any | None:
        # compiled: None, the limbs become a constant of the graph
        return None if torch.compiler.is_compiling() else _limbs(inv_freq, compute, device)

    def rotate(self, head: Any, cos: Any, sin: Any, layout: str) -> Any:
        # eager and Inductor: half-width products; addcmul fuses a product and the sum (two
        # passes per half instead of three). The interleaved layout gets the same roundings.
        r = int(head.shape[-1])
        if _fills_one_new_tensor(head, cos, sin):
            return _rotate_into_new(head, cos, sin, layout)
        if layout == "half":
            a, b = head[..., : r // 2], head[..., r // 2 :]
            return torch.cat([torch.addcmul(a * cos, b, sin, value=-1),
                              torch.addcmul(b * cos, a, sin)], dim=-1)
        pairs = head.reshape(*head.shape[:-1], r // 2, 2)
        a, b = pairs[..., 0], pairs[..., 1]
        rotated = [torch.addcmul(a * cos, b, sin, value=-1), torch.addcmul(b * cos, a, sin)]
        return torch.stack(rotated, dim=-1).reshape(*head.shape[:-1], r)

    def toeplitz(self, rows: Any, q_len: int, k_len: int) -> Any:
        # windows of the rows read backwards, then one copy: no [q_len, k_len] index array
        # (twice as fast on CPU as a gather)
        return rows.unfold(1, k_len, 1).flip(1).contiguous()

    def constant_result(self, fn: Any) -> Any:
        if "torch._dynamo" in sys.modules:
            return torch.compiler.assume_constant_result(fn)
        # The public call imports dynamo, a second that an eager-only process never needs. The
        # mark it sets is the one set here (tests/per_encoding/test_deberta_compile.py holds
        # the two to each other).
        fn._dynamo_marked_constant = True
        return fn


def _fills_one_new_tensor(head: Any, cos: Any, sin: Any) -> bool:
    """Whether the rotation may write its halves straight into one new tensor: the out= ops
    may run (:func:`out_ops_allowed`), and cos/sin broadcast to the half width of ``head``
    without widening it."""
    return out_ops_allowed(head, cos, sin) and _fits(cos.shape, head.shape) \
        and _fits(sin.shape, head.shape)


def out_ops_allowed(*tensors: Any) -> bool:
    """Whether a rotation of ``tensors`` may be written with out= and in-place ops: eager, no
    autograd through them (out= ops have none), no functorch wrapper on any of them (vmap
    over the positions wraps cos and sin only), and one dtype (a mixed call keeps its
    promoted result dtype)."""
    if torch.compiler.is_compiling() or any(map(_is_wrapped, tensors)):
        return False
    if len({t.dtype for t in tensors}) != 1:
        return False
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))


def _fits(table: Any, head: Any) -> bool:
    """Whether a ``table`` shape broadcasts to the half width of a ``head`` shape."""
    if len(table) > len(head) or table[-1] != head[-1] // 2:
        return False
    return all(t in (1, h) for t, h in zip(reversed(table[:-1]), reversed(head[:-1]), strict=False))


def _rotate_into_new(head: Any, cos: Any, sin: Any, layout: str) -> Any:
    """The rotation written half by half into one new tensor: a product and an addcmul into
    each half, with no concatenation afterwards (five passes over the head's size where the
    concatenating form makes seven), and the same roundings."""
    out = torch.empty(head.shape, dtype=head.dtype, device=head.device)
    rotate_into(head, out, cos, sin, int(head.shape[-1]), layout)
    return out


def pair_views(t: Any, rd: int, layout: str) -> tuple[Any, Any]:
    """The two members of every rotated pair of ``t[..., :rd]``, as views."""
    if layout == "half":  # one split op for both halves
        first, second = t.split(rd // 2, -1)[:2]
        return first, second
    return t[..., 0:rd:2], t[..., 1:rd:2]


def rotate_into(x: Any, target: Any, cos: Any, sin: Any, rd: int, layout: str) -> None:
    """``target[..., :rd]`` = ``x`` rotated by ``cos``/``sin`` (half width, x's dtype), the
    rest copied; ``target`` may be ``x`` itself (or another view of the same memory, as a
    tile of an in-place call is). Out= and in-place ops: eager only, no autograd
    (:func:`out_ops_allowed`)."""
    a, b = pair_views(x, rd, layout)
    if target is x or same_view(target, x):
        old_a = a.clone()  # the only temporary: half the rotated features
        a.mul_(cos).addcmul_(b, sin, value=-1)
        b.mul_(cos).addcmul_(old_a, sin)
        return
    ta, tb = pair_views(target, rd, layout)
    torch.mul(a, cos, out=ta).addcmul_(b, sin, value=-1)
    torch.mul(b, cos, out=tb).addcmul_(a, sin)
    if rd < x.shape[-1]:
        target[..., rd:].copy_(x[..., rd:])


_is_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
_is_batched = torch._C._functorch.is_batchedtensor

NATIVE = native.register(TorchNative())
