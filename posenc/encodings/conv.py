"""Convolutional positional encoding: ``y = x + depthwise_conv(x) + bias`` (CPVT's PEG, 1-D or 2-D)."""

from __future__ import annotations

import itertools
from types import ModuleType
from typing import Any

from .. import array_api, params, validation
from ..errors import ParameterError
from ..layers import ZEROS, Layer, Weight, normal

__all__ = ["conv"]

PADDINGS = ("zeros", "circular")


def _shape(a: Any) -> tuple[int, ...]:
    return tuple(int(n) for n in a.shape)


def _as_array(xp: ModuleType, name: str, value: Any, device: Any) -> Any:
    if value is None or hasattr(value, "dtype"):
        return value
    try:
        return array_api.asarray(xp, value, device=device)
    except (TypeError, ValueError) as exc:
        raise ParameterError(f"{name} must be an array, got {type(value).__name__}") from exc


def _kernel_rank(ks: tuple[int, ...]) -> str:
    return (f"kernel must have shape [k, C] (1-D) or [kh, kw, C] (2-D), got shape {ks}: "
            f"{len(ks) - 1} spatial dims (kernel.ndim - 1), expected 1 or 2")


def _x_rank(xs: tuple[int, ...], ks: tuple[int, ...]) -> str:
    """x has fewer dims than the kernel's spatial dims plus channels (the kernel's error first)."""
    spatial = len(ks) - 1
    if spatial not in (1, 2):
        return _kernel_rank(ks)
    layout = "[..., seq, C]" if spatial == 1 else "[..., H, W, C]"
    return (f"x has shape {xs} but kernel has shape {ks}: a {spatial}-D kernel needs x of shape "
            f"{layout}, at least {spatial + 1} dims")


_INPUTS = validation.Inputs("conv", same_dtype=False, messages={
    "rank:x": lambda f: _x_rank(f["shape"], f["shape_of"]["kernel"]),
    "rank:kernel": lambda f: _kernel_rank(f["shape"]),
    "axis:C": "{name} has shape {shape} but {first} has shape {first_shape}: "
              "kernel.shape[-1]={size} must equal the channel count x.shape[-1]={first_size} "
              "(one filter per channel)",
    "shape:bias": "bias has shape {shape} but x has shape {shape_of[x]}: bias must be [C] = "
                  "[{size_of[C]}]"})


def _check_shapes(x: Any, kernel: Any, padding: str) -> int:
    """The rules across inputs that the declared shapes leave out; return the number of spatial
    dims (1 or 2)."""
    xs, ks = _shape(x), _shape(kernel)
    spatial = len(ks) - 1
    if len(xs) < spatial + 1:
        raise ParameterError(_x_rank(xs, ks))
    if any(k % 2 == 0 for k in ks[:-1]):
        raise ParameterError(
            f"kernel has shape {ks}: kernel sizes {ks[:-1]} must be odd (an even size has no "
            "symmetric 'same' padding)")
    if padding == "circular":
        grid = xs[-1 - spatial : -1]
        for axis, (k, n) in enumerate(zip(ks[:-1], grid, strict=True)):
            if k > n:
                raise ParameterError(
                    f"kernel has shape {ks} but x has shape {xs}: with padding='circular' a kernel "
                    f"size must not exceed the size it slides over (spatial axis {axis}: {k} > {n}), "
                    "or a tap would wrap onto the same token twice")
    return spatial


def _take(a: Any, axis: int, start: int, stop: int) -> Any:
    """``a[start:stop]`` along the negative ``axis``."""
    return a[(..., slice(start, stop), *([slice(None)] * (-axis - 1)))]


def _pad(xp: ModuleType, a: Any, axis: int, width: int, padding: str, device: Any) -> Any:
    """Pad ``width`` entries on both sides of the negative ``axis``: zeros, or wrapped slices."""
    if width == 0:
        return a
    n = int(a.shape[axis])
    if padding == "circular":  # width <= n: checked (kernel size <= spatial size)
        return xp.concat([_take(a, axis, n - width, n), a, _take(a, axis, 0, width)], axis=axis)
    shape = list(a.shape)
    shape[axis] = width
    zeros = (xp.zeros(tuple(shape), dtype=a.dtype) if device is None
             else xp.zeros(tuple(shape), dtype=a.dtype, device=device))
    return xp.concat([zeros, a, zeros], axis=axis)


def conv(x: Any, kernel: Any, bias: Any = None, *, padding: str = "zeros") -> Any:
    """``x + depthwise_conv(x, kernel) + bias``, stride 1, same shape and dtype as ``x``.

    1-D: ``x [..., seq, C]`` with ``kernel [k, C]``; 2-D (CPVT's PEG over a patch grid):
    ``x [..., H, W, C]`` with ``kernel [kh, kw, C]``. The number of spatial dims is
    ``kernel.ndim - 1``; leading axes of ``x`` are batch axes. Channels last: torch's Conv1d
    weight ``[C, 1, k]`` is ``weight[:, 0].T`` here, Conv2d's ``[C, 1, kh, kw]`` is
    ``weight[:, 0].permute(1, 2, 0)``. Cross-correlation as in torch/TF (no kernel flip): tap
    ``t`` reads the token at offset ``t - k // 2``. Kernel sizes must be odd ("same" output).
    ``bias``: optional ``[C]``.

    ``padding``: ``"zeros"`` (tokens near a border see zeros, which leaks absolute position)
    or ``"circular"`` (the grid wraps around; no position leaks; every kernel size must be
    at most the spatial size it slides over). The sum runs in float32 for bfloat16/float16
    (float64 for float64) and is cast back to ``x``'s dtype.
    """
    xp = array_api.namespace(x=x, kernel=kernel, bias=bias)
    params.choice("padding", padding, PADDINGS)
    if not hasattr(x, "dtype"):
        raise ParameterError(f"x must be an array, got {type(x).__name__}")
    device = array_api.device_of(x)
    kernel = _as_array(xp, "kernel", kernel, device)
    bias = _as_array(xp, "bias", bias, device)
    _INPUTS.check(xp, x=x, kernel=kernel, bias=bias)
    spatial = _check_shapes(x, kernel, padding)

    compute = array_api.compute_dtype(xp, x.dtype)
    xc = xp.astype(x, compute, copy=False)
    kc = xp.astype(kernel, compute, copy=False)
    sizes = _shape(kernel)[:-1]
    grid = _shape(x)[-1 - spatial : -1]
    padded = xc
    for i, k in enumerate(sizes):  # spatial axis i is axis -(spatial + 1 - i) of x
        padded = _pad(xp, padded, i - spatial - 1, k // 2, padding, device)

    # The array API has no convolution: sum kernel-tap-weighted shifted windows of the padded
    # input. The Python loop runs over the k (or kh * kw) taps, a small static count, never
    # over positions; each step is one vectorised multiply-add over the whole grid.
    total = xc
    for tap in itertools.product(*(range(k) for k in sizes)):
        window = padded[(..., *(slice(t, t + n) for t, n in zip(tap, grid, strict=True)),
                         slice(None))]
        total = total + kc[(*tap, slice(None))] * window
    if bias is not None:
        total = total + xp.astype(bias, compute, copy=False)
    return xp.astype(total, x.dtype, copy=False)


LAYERS = (Layer(
    "ConvPositionEncoding", "conv",
    weights=(Weight("kernel", lambda c: (*(c["kernel_size"],) * c["spatial_dims"], c["channels"]),
                    normal(0.02)),
             Weight("bias", lambda c: (c["channels"],), ZEROS, optional="use_bias")),
    sizes=("channels", "kernel_size", "spatial_dims", "use_bias"),
    size_defaults={"kernel_size": 3, "spatial_dims": 1, "use_bias": True}, config=("padding",),
    doc="x + depthwise conv(x) (CPVT's PEG): layer(x) -> x-shaped"),)
