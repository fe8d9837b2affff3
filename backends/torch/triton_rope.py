"""PyTorch with a fused Triton rotary kernel: ``from posenc.backends import torch_triton as pe``.

The ``torch`` backend with one override: ``rope`` runs :mod:`posenc.backends.torch.triton_kernel`
(``pip install 'posenc[triton]'``), so ``posenc conformance --backend torch-triton --device
cuda`` holds the kernel to exactly the goldens and properties of the reference path. On top
of ``rope``'s signature it takes ``k=`` (rotated in the same launch; it may have fewer heads:
grouped-query attention, and ``(q, k)`` is returned) and ``inplace=True`` (overwrites x and k;
no autograd through them).

The kernel runs float32, bfloat16 and float16 tensors on CUDA (on CPU tensors too under
``TRITON_INTERPRET=1``, Triton's interpreter). float64 tensors, or CPU tensors without the
interpreter, go through the array-API implementation. Autograd: the backward pass is the same
kernel rotating by the opposite angles. Under ``torch.compile`` the kernel is the
``torch.library.custom_op`` ``posenc::rotary`` (``posenc::rotary_`` in place): opaque to
Inductor, with fake implementations and mutation annotations, so a graph calls it as it is
(the ``triton_op`` it replaced, which Inductor traced into, gave unwritten outputs on a GPU).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import typing
from collections.abc import Mapping
from typing import Any

from posenc import rotary
from posenc.encodings.rope import prepare
from posenc.encodings.rope import rope as reference_rope
from posenc.errors import MissingFrameworkError, ParameterError
from posenc.host_cache import host_cache

from ..convenience import bind_module
from . import BACKEND as TORCH

__all__ = ["BACKEND", "prepared", "rope"]

POSITIONS_ARANGE, POSITIONS_INT, POSITIONS_FLOAT = 0, 1, 2  # the kernel's POS_MODE


def interpreting() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _devices() -> list[str]:
    import torch

    return [*(["cpu"] if interpreting() else []),
            *(["cuda"] if torch.cuda.is_available() else [])]


def _ops() -> tuple[Any, Any]:
    """``posenc::rotary`` (out of place, differentiable) and ``posenc::rotary_`` (in place)."""
    if _OPS is None:
        raise MissingFrameworkError("triton", "triton")
    return _OPS


def _register() -> tuple[Any, Any]:
    """Register the two ``torch.library.custom_op``s (once, when this module is imported: a
    registration must not happen inside a torch.compile trace). Custom ops are opaque to
    torch.compile: a graph calls them as they are, with their fake implementations giving
    the shapes, and the mutation annotations (``q``, ``k`` in place, the range flag ``ok``
    the kernel clears) tell functionalization what they write. (A ``triton_op``, which
    Inductor traces into, gave unwritten outputs on an H100.)"""
    import torch
    from torch.library import custom_op, register_fake

    from . import triton_kernel

    runs = (triton_kernel.rotary_kernel, triton_kernel.range_kernel)

    def rotary(q: torch.Tensor, k: torch.Tensor | None, positions: torch.Tensor | None,
               pos_mode: int, limbs: torch.Tensor, switch: torch.Tensor | None,
               rotary_dim: int, interleaved: bool, factor: float,
               inverse: bool, check: bool = False) -> list[torch.Tensor]:
        # functional (autograd needs it): the range flag is made here and returned last
        ok = torch.ones((), dtype=torch.int32, device=q.device) if _flags(check, positions) \
            else None
        outs = _out_of_place(runs, q, k, positions, pos_mode, limbs, switch, rotary_dim,
                             interleaved, factor, inverse, ok)
        return outs if ok is None else [*outs, ok]

    def rotary_(q: torch.Tensor, k: torch.Tensor | None, positions: torch.Tensor | None,
                pos_mode: int, limbs: torch.Tensor, switch: torch.Tensor | None,
                rotary_dim: int, interleaved: bool, factor: float,
                ok: torch.Tensor | None) -> None:
        _in_place(runs, q, k, positions, pos_mode, limbs, switch, rotary_dim, interleaved,
                  factor, ok)

    # the schemas are inferred from the annotations, which are strings in this module
    for fn in (rotary, rotary_):
        hints = typing.get_type_hints(fn, localns={"torch": torch})
        fn.__annotations__ = {**hints, "return": None if hints["return"] is type(None)
                              else hints["return"]}
    rotary = custom_op("posenc::rotary", mutates_args=())(rotary)
    custom_op("posenc::rotary_", mutates_args=("q", "k", "ok"))(rotary_)

    @register_fake("posenc::rotary")
    def _(q: Any, k: Any, positions: Any, *args: Any) -> list[Any]:
        check = args[-1] if len(args) == 8 else False
        return [torch.empty_like(q), *([] if k is None else [torch.empty_like(k)]),
                *([torch.empty((), dtype=torch.int32, device=q.device)]
                  if _flags(check, positions) else [])]

    @register_fake("posenc::rotary_")
    def _(*_args: Any) -> None:
        return None

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        _, k, positions, pos_mode, limbs, switch, *static, _check = inputs
        ctx.save_for_backward(positions, limbs, switch)
        ctx.pos_mode, ctx.static, ctx.has_k = pos_mode, static, k is not None

    def backward(ctx: Any, grads: list[Any]) -> tuple[Any, ...]:
        positions, limbs, switch = ctx.saved_tensors
        pos_mode = ctx.pos_mode
        rotary_dim, interleaved, factor, inverse = ctx.static
        gq = grads[0].contiguous()
        gk = grads[1].contiguous() if ctx.has_k else None
        # the rotation is orthogonal (times the factor): its transpose rotates backwards
        back = torch.ops.posenc.rotary(gq, gk, positions, pos_mode, limbs, switch, rotary_dim,
                                       interleaved, factor, not inverse, False)
        return (back[0], back[1] if ctx.has_k else None, *([None] * 9))

    rotary.register_autograd(backward, setup_context=setup_context)
    return torch.ops.posenc.rotary, torch.ops.posenc.rotary_


def _flags(check: bool, positions: Any) -> bool:
    """Whether ``posenc::rotary`` checks the positions' range (and returns the flag last)."""
    return bool(check) and positions is not None


def _out_of_place(runs: tuple[Any, Any], q: Any, k: Any, positions: Any, pos_mode: int,
                  limbs: Any, switch: Any, rotary_dim: int, interleaved: bool, factor: float,
                  inverse: bool, ok: Any) -> list[Any]:
    import torch

    outs = [torch.empty_like(q), *([] if k is None else [torch.empty_like(k)])]
    _launch(runs[0], q, k, outs[0], outs[-1] if k is not None else None, positions, pos_mode,
            limbs, switch, rotary_dim, interleaved, factor, inverse, copy_tail=True, ok=ok)
    return outs


def _in_place(runs: tuple[Any, Any], q: Any, k: Any, positions: Any, pos_mode: int,
              limbs: Any, switch: Any, rotary_dim: int, interleaved: bool, factor: float,
              ok: Any) -> None:
    from . import triton_kernel

    # a position found outside the range during the rotation would leave q and k half
    # rotated: check first, and gate the rotation on the flag
    gated = ok is not None and positions is not None and q.numel() > 0
    if gated:
        triton_kernel.check_range(runs[1], positions, ok)
    _launch(runs[0], q, k, q, k, positions, pos_mode, limbs, switch, rotary_dim, interleaved,
            factor, False, copy_tail=False, ok=ok, gated=gated)


def _direct_runs(*tensors: Any) -> tuple[Any, Any] | None:
    """The bare kernels when the (eager) call needs nothing the registered ops give (plain
    tensors, no autograd, no dispatch mode watching): the dispatcher's tens of microseconds
    per call stay out of the launch; None otherwise (functorch or subclass tensors,
    gradients, a TorchDispatchMode such as FakeTensorMode or a FLOP counter)."""
    import torch
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    from . import triton_kernel

    if _get_current_dispatch_mode() is not None:
        return None
    for t in tensors:
        if t is None:
            continue
        if type(t) is not torch.Tensor or torch._C._functorch.is_functorch_wrapped_tensor(t) \
                or (t.requires_grad and torch.is_grad_enabled()):
            return None
    return triton_kernel.rotary_kernel, triton_kernel.range_kernel


def _as_4d(x: Any) -> Any:
    """``[B, H, S, D]`` view of ``x`` (``[..., S, D]``): the first axis is the batch (the axis
    batched positions index), the others between it and ``S`` merge into heads."""
    if x.ndim == 2:
        return x[None, None]
    if x.ndim == 3:
        return x[:, None]
    return x if x.ndim == 4 else x.flatten(1, -3)


def _launch(run: Any, q: Any, k: Any, q_out: Any, k_out: Any, positions: Any, pos_mode: int,
            limbs: Any, switch: Any, rotary_dim: int, interleaved: bool, factor: float,
            inverse: bool, *, copy_tail: bool, ok: Any = None, gated: bool = False) -> None:
    if q.numel() == 0:
        return
    from . import triton_kernel

    views = [None if t is None else _as_4d(t) for t in (q, q_out, k, k_out)]
    triton_kernel.launch(run, *views, positions, pos_mode, limbs, switch,
                         rotary_dim=rotary_dim, interleaved=interleaved, factor=factor,
                         inverse=inverse, copy_tail=copy_tail, ok=ok, gated=gated)


def _limbs(sched: Any, device: Any) -> Any:
    """The schedule's frequency limbs as a float32 tensor on ``device``: built once per
    schedule and device in eager mode (a host-to-device copy per call costs more than the
    kernel at decode sizes); torch.compile folds them into constants instead."""
    return _limbs_tensor(sched.inv_freq, sched.long_inv_freq, str(device))


@host_cache(maxsize=64)
def _limbs_tensor(inv_freq: tuple[float, ...], long_inv_freq: tuple[float, ...] | None,
                  device: str) -> Any:
    import torch

    sets = [inv_freq] + ([long_inv_freq] if long_inv_freq else [])
    values = [v for freqs in sets for row in rotary.turn_limbs(freqs) for v in row]
    return torch.tensor(values, dtype=torch.float32, device=device)



def rope(
    x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
    rotary_dim: int | None = None, scaling: Mapping[str, Any] | None = None,
    seq_len: int | None = None, k: Any = None, inplace: bool = False,
) -> Any:
    """:func:`posenc.rope` by one fused Triton kernel; with ``k=`` q and k rotate in one launch
    and ``(q, k)`` is returned; ``inplace=True`` overwrites them (see the module docstring)."""

    params = {"base": base, "layout": layout, "rotary_dim": rotary_dim, "scaling": scaling,
              "seq_len": seq_len}
    op = prepared(x, positions, k=k, **params)
    if op is not None:
        return op(x, k, inplace=inplace)
    return _reference(x, k, positions, params, inplace=inplace)  # float64, CPU, or traced


def _reference(x: Any, k: Any, positions: Any, params: dict[str, Any], *,
               inplace: bool) -> Any:
    """:func:`rope`'s result by the array-API path (no kernel)."""
    import torch

    xs = (x,) if k is None else (x, k)
    results = [reference_rope(t, positions, **params) for t in xs]
    if inplace:
        with torch.no_grad():
            for t, r in zip(xs, results, strict=True):
                t.copy_(r)
        return x if k is None else (x, k)
    return results[0] if k is None else tuple(results)


def prepared(x: Any, positions: Any = None, *, k: Any = None, base: float = 10000.0,
             layout: str = "half", rotary_dim: int | None = None,
             scaling: Mapping[str, Any] | None = None, seq_len: int | None = None) -> Any:
    """The kernel with its arguments checked and prepared once, for a loop over tensors of
    the same shape: ``op = prepared(q, positions, k=k, ...)``, then ``op(q, k)`` (or
    ``op(q, k, inplace=True)``) rotates like :func:`rope`, with no checks and no host work per
    call. None where :func:`rope` would not use the kernel (float64, CPU). Each call checks
    the positions' range on the device and asserts it there afterwards: an out-of-range
    position raises after the launch (in place, it is checked by a first launch and the
    tensors are left untouched). Called inside torch.compile, a call is the custom op (the
    range is then checked by the traced argument checks)."""
    import torch

    from posenc import array_api

    # eager kernel calls check the positions' range in the kernel (a device flag, then one
    # device-side assert): no host read, two ops besides the launch (in place,
    # the launch checks first, then rotates gated on the flag)
    kernel_checks = (getattr(x, "dtype", None) in (torch.float32, torch.bfloat16, torch.float16)
                     and getattr(getattr(x, "device", None), "type", None) in _kernel_devices()
                     and positions is not None and not array_api.is_traced(positions)
                     and isinstance(positions, torch.Tensor))
    params = {"base": base, "layout": layout, "rotary_dim": rotary_dim, "scaling": scaling,
              "seq_len": seq_len}
    _, device, positions, sched = prepare(x, positions, **params,
                                          check_range=not kernel_checks)
    if k is not None:
        from .qk_pair import check_pair  # RotaryEmbedding's rule for (q, k)

        check_pair(x, k)
        if k.device != x.device:
            raise ParameterError(f"q is on {x.device} but k is on {k.device}")
    if x.dtype == torch.float64 or (device.type != "cuda" and not interpreting()):
        return None
    return _Launch(x, positions, sched, layout, check_range=kernel_checks)


def _kernel_devices() -> tuple[str, ...]:
    return ("cuda", "cpu") if interpreting() else ("cuda",)


class _Launch:
    """The kernel's arguments for one rotation: positions as the kernel reads them, frequency
    limbs on the device, LongRoPE's switch (a device flag, no host sync)."""

    def __init__(self, x: Any, positions: Any, sched: Any, layout: str, *,
                 check_range: bool = False) -> None:
        import torch

        self.check_range = check_range and positions is not None

        switch = None
        if positions is None:
            pos_mode = POSITIONS_ARANGE
            if sched.long_inv_freq is not None:  # a static choice: the length of x decides
                long = int(x.shape[-2]) > sched.switch_length
                sched = dataclasses.replace(sched, inv_freq=sched.long_inv_freq if long
                                            else sched.inv_freq, long_inv_freq=None)
        else:
            floating = positions.dtype.is_floating_point
            pos_mode = POSITIONS_FLOAT if floating else POSITIONS_INT
            positions = positions.to(torch.float32) if floating else positions
            positions = positions.reshape(1, -1) if positions.ndim == 1 else positions
            positions = positions.contiguous()
            if sched.long_inv_freq is not None:
                switch = (torch.max(positions) + 1 > sched.switch_length).to(torch.int32)
        self.args = (positions, pos_mode, _limbs(sched, x.device), switch, sched.rotary_dim,
                     layout == "interleaved", float(sched.attention_factor))

    def __call__(self, x: Any, k: Any = None, *, inplace: bool = False, out: Any = None) -> Any:
        """Rotate ``x`` (and ``k``): new tensors, in place, or into ``out`` (a tensor, or a
        ``(q_out, k_out)`` pair, last axis contiguous and sharing no memory with the inputs:
        the caller checks that). Traced by torch.compile, the calls are the custom ops."""
        import torch

        from .memory import may_overlap, same_view

        traced = torch.compiler.is_compiling()
        runs = None if traced else _direct_runs(x, k)
        rotary, rotary_ = _ops()
        if inplace:
            if k is not None and (same_view(x, k) or may_overlap(x, k)):
                raise ParameterError("inplace=True with k sharing memory with x: the kernel "
                                     "would rotate the shared elements twice")
            for name, t in (("x", x), ("k", k)):
                if t is not None and not _viewable(t):
                    raise ParameterError(
                        f"inplace=True: {name} has strides {t.stride()}; the kernel needs the "
                        "last axis contiguous (and, beyond 4-D, the leading axes mergeable)")
            ok = None if traced else self._flag(x)
            if runs is None:
                rotary_(x, k, *self.args, ok)
            else:
                _in_place(runs, x, k, *self.args, ok)
            self._assert(ok)
            return x if k is None else (x, k)
        q_in, k_in = (None if t is None else t if _viewable(t) else t.contiguous()
                      for t in (x, k))
        check = self.check_range and not traced
        if runs is not None and out is not None and all(_viewable(o) for o in out):
            ok = self._flag(x)  # straight into the caller's tensors: one launch, no copy
            _launch(runs[0], q_in, k_in, out[0], out[1] if k is not None else None,
                    *self.args, False, copy_tail=True, ok=ok)
            self._assert(ok)
            return out[0] if k is None else tuple(out)
        if runs is None:
            outs = rotary(q_in, k_in, *self.args, False, check)
            ok = outs[-1] if check else None
        else:
            ok = self._flag(x)
            outs = _out_of_place(runs, q_in, k_in, *self.args, False, ok)
        self._assert(ok)
        if out is not None:
            for target, value in zip(out, outs, strict=False):
                target.copy_(value)
            return out[0] if k is None else tuple(out)
        return outs[0] if k is None else (outs[0], outs[1])

    def _flag(self, x: Any) -> Any:
        import torch

        return torch.ones((), dtype=torch.int32, device=x.device) if self.check_range else None

    def _assert(self, ok: Any) -> None:
        """On CUDA a device-side assert (the host does not wait); on CPU (the interpreter) it
        fails at once, and the host check then names the value."""
        if ok is None:
            return
        import torch

        from posenc import array_api

        try:
            torch._assert_async(ok, "positions outside float32's exact integers (|p| <= 2**24)")
        except RuntimeError:
            positions = self.args[0]
            array_api.check_position_range(array_api.namespace(positions=positions), positions,
                                        compute=torch.float32)
            raise


def _viewable(t: Any) -> bool:
    """Whether the kernel can address ``t`` as it is (no copy)."""
    return t.stride(-1) == 1 and (t.ndim <= 4 or t[..., 0, 0].is_contiguous())


# importing this module is asking for the kernel: with Triton installed, register it now
_OPS = _register() if importlib.util.find_spec("triton") is not None else None

BACKEND = dataclasses.replace(
    TORCH, name="torch-triton", overrides={"rope": rope}, own_code=True, devices=_devices,
    requires="triton", extra="triton")

__getattr__, __dir__ = bind_module(BACKEND)
