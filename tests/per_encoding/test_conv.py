"""conv: bad input on every backend, and the stored goldens against torch's depthwise convolution."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

# importing TensorFlow (through the pe fixture) before torch has crashed the process
with contextlib.suppress(ImportError):
    import torch  # noqa: F401

import posenc
from posenc import golden
from posenc.catalog import specs
from posenc.errors import ParameterError
from posenc.specs import resolve_params

X1 = np.zeros((2, 10, 4))
K1 = np.zeros((3, 4))
X2 = np.zeros((2, 5, 6, 3))
K2 = np.zeros((3, 3, 3))


# --------------------------------------------------------------------------------------------
# bad input: ParameterError naming the parameter and the value, on every backend
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("x", "kernel", "kwargs", "message"),
    [
        # x with too few dims for the kernel
        (np.zeros((6, 3)), K2, {}, r"x has shape \(6, 3\) but kernel has shape \(3, 3, 3\): a "
                                   r"2-D kernel needs x of shape \[..., H, W, C\], at least 3 dims"),
        (np.zeros(4), K1, {}, r"x has shape \(4,\) but kernel has shape \(3, 4\)"),
        # channel mismatches
        (X1, np.zeros((3, 5)), {}, r"kernel has shape \(3, 5\) but x has shape \(2, 10, 4\): "
                                   r"kernel.shape\[-1\]=5 must equal the channel count "
                                   r"x.shape\[-1\]=4"),
        (X2, np.zeros((3, 3, 4)), {}, r"kernel.shape\[-1\]=4 must equal the channel count "
                                      r"x.shape\[-1\]=3"),
        (X1, K1, {"bias": np.zeros(5)}, r"bias has shape \(5,\) but x has shape \(2, 10, 4\): "
                                        r"bias must be \[C\] = \[4\]"),
        (X1, K1, {"bias": np.zeros((1, 4))}, r"bias has shape \(1, 4\)"),
        # even kernel sizes
        (X1, np.zeros((4, 4)), {}, r"kernel has shape \(4, 4\): kernel sizes \(4,\) must be odd"),
        (X2, np.zeros((3, 2, 3)), {}, r"kernel has shape \(3, 2, 3\): kernel sizes \(3, 2\) must "
                                      r"be odd"),
        (X1, np.zeros((0, 4)), {}, r"kernel sizes \(0,\) must be odd"),
        # unknown padding: the message lists the options
        (X1, K1, {"padding": "reflect"}, r"padding='reflect' is not one of 'zeros', 'circular'"),
        (X1, K1, {"padding": "same"}, r"padding='same' is not one of 'zeros', 'circular'"),
        # kernels with 0 or >= 3 spatial dims
        (X1, np.zeros(4), {}, r"kernel must have shape \[k, C\] \(1-D\) or \[kh, kw, C\] \(2-D\), "
                              r"got shape \(4,\): 0 spatial dims"),
        (np.zeros((2, 5, 5, 5, 3)), np.zeros((3, 3, 3, 3)), {},
         r"got shape \(3, 3, 3, 3\): 3 spatial dims \(kernel.ndim - 1\), expected 1 or 2"),
        # circular padding with a kernel larger than the grid
        (np.zeros((2, 3, 4)), np.zeros((5, 4)), {"padding": "circular"},
         r"kernel has shape \(5, 4\) but x has shape \(2, 3, 4\): with padding='circular' a "
         r"kernel size must not exceed the size it slides over \(spatial axis 0: 5 > 3\)"),
        (np.zeros((5, 4, 3)), np.zeros((3, 5, 3)), {"padding": "circular"},
         r"spatial axis 1: 5 > 4"),
    ],
)
def test_conv_bad_inputs(pe, x, kernel, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.conv(x, kernel, **kwargs)


def test_conv_integer_inputs(pe) -> None:
    with pytest.raises(ParameterError, match=r"x must have a real floating dtype, got int(32|64)"):
        pe.conv(np.zeros((2, 10, 4), np.int64), K1)
    with pytest.raises(ParameterError, match=r"kernel must have a real floating dtype, got int(32|64)"):
        pe.conv(X1, np.zeros((3, 4), np.int64))
    with pytest.raises(ParameterError, match=r"bias must have a real floating dtype, got int(32|64)"):
        pe.conv(X1, K1, np.zeros(4, np.int64))


def test_conv_kernel_larger_than_grid_is_fine_with_zeros(pe) -> None:
    """Zero padding needs no size limit: taps beyond the grid read zeros."""
    x = np.array([[1.0], [2.0]])  # seq 2, C 1
    out = np.asarray(pe.BACKEND.to_numpy(pe.conv(x, np.ones((5, 1)))))
    np.testing.assert_array_equal(out, [[4.0], [5.0]])  # x + (1 + 2) at both positions


def test_conv_keeps_low_precision_dtype() -> None:
    torch = pytest.importorskip("torch")
    x = torch.ones(1, 6, 2, dtype=torch.bfloat16)
    out = posenc.conv(x, torch.ones(3, 2, dtype=torch.bfloat16))
    assert out.dtype == torch.bfloat16
    assert out[0, :, 0].tolist() == [3.0, 4.0, 4.0, 4.0, 4.0, 3.0]


# --------------------------------------------------------------------------------------------
# oracle: torch.nn.functional.conv1d / conv2d (groups=C) in float64, against the stored golden
# --------------------------------------------------------------------------------------------

SPEC = specs()["conv"]
CASES = [c.name for c in SPEC.cases]


def _torch_conv(x: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None,
                padding: str) -> np.ndarray:
    """x + depthwise conv by torch, channels-last in and out (an independent peer)."""
    import torch
    import torch.nn.functional as F

    spatial = kernel.ndim - 1
    channels = x.shape[-1]
    grid = x.shape[-1 - spatial : -1]
    # [..., *grid, C] -> [N, C, *grid]
    flat = torch.from_numpy(np.ascontiguousarray(x.reshape(-1, *grid, channels)))
    tokens = flat.movedim(-1, 1)
    # kernel [*sizes, C] -> torch's depthwise weight [C, 1, *sizes]
    weight = torch.from_numpy(np.ascontiguousarray(kernel)).movedim(-1, 0).unsqueeze(1)
    b = None if bias is None else torch.from_numpy(bias)
    conv = F.conv1d if spatial == 1 else F.conv2d
    if padding == "zeros":
        out = conv(tokens, weight, b, padding="same", groups=channels)
    else:
        pads: list[int] = []
        for k in reversed(kernel.shape[:-1]):  # F.pad lists the last axis first
            pads += [k // 2, k // 2]
        out = conv(F.pad(tokens, pads, mode="circular"), weight, b, padding=0, groups=channels)
    assert out.dtype == torch.float64
    return x + out.movedim(1, -1).numpy().reshape(x.shape)


@pytest.mark.oracle
@pytest.mark.parametrize("name", CASES)
def test_conv_golden_vs_torch(name: str) -> None:
    pytest.importorskip("torch")
    case = golden.load(SPEC).cases[name]
    params = resolve_params(SPEC, case.params)
    x, kernel, bias = case.inputs["x"], case.inputs["kernel"], case.inputs["bias"]
    expected = _torch_conv(x, kernel, bias, params["padding"])
    # both sides sum the same exactly representable products in float64; only the order of the
    # additions may differ, a few ulps of the largest partial sum
    np.testing.assert_allclose(case.output, expected, rtol=0, atol=1e-12,
                               err_msg=f"conv/{name} vs torch F.conv{kernel.ndim - 1}d")


@pytest.mark.oracle
def test_torch_weight_layout_maps_to_kernel() -> None:
    """The documented mapping: a torch depthwise Conv2d (weight [C, 1, kh, kw]) applied to
    channels-first tokens equals conv with kernel = weight[:, 0].permute(1, 2, 0)."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(0)
    layer = torch.nn.Conv2d(3, 3, (3, 5), padding="same", groups=3, dtype=torch.float64)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen, dtype=torch.float64))
        tokens = torch.randn(2, 3, 5, 6, generator=gen, dtype=torch.float64)  # [N, C, H, W]
        expected = (tokens + layer(tokens)).permute(0, 2, 3, 1)
        got = posenc.conv(tokens.permute(0, 2, 3, 1), layer.weight[:, 0].permute(1, 2, 0),
                          layer.bias)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    conv1 = torch.nn.Conv1d(4, 4, 5, padding="same", groups=4, dtype=torch.float64)
    with torch.no_grad():
        seq = torch.randn(2, 4, 9, generator=gen, dtype=torch.float64)  # [N, C, L]
        expected = (seq + conv1(seq)).transpose(1, 2)
        got = posenc.conv(seq.transpose(1, 2), conv1.weight[:, 0].T, conv1.bias)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
