"""combine: bad inputs on every backend, and the goldens against torch's own operators."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

with contextlib.suppress(ImportError):
    import torch  # noqa: F401 - before TensorFlow (see tests/peers/test_oracles.py)

import posenc
from posenc import golden
from posenc.catalog import specs
from posenc.errors import MixedArrayLibrariesError, ParameterError
from posenc.specs import resolve_params

X = np.zeros((2, 5, 4))


# --------------------------------------------------------------------------------------------
# bad inputs, on every backend
# --------------------------------------------------------------------------------------------

def test_unknown_mode_lists_the_modes(pe) -> None:
    with pytest.raises(ParameterError, match=r"mode='sum' is not one of 'add', 'multiply', "
                                             r"'scale', 'concat'"):
        pe.combine(X, np.zeros((5, 4)), mode="sum")


@pytest.mark.parametrize(
    ("p_shape", "mode", "message"),
    [
        ((6, 4), "add", r"p has shape \(6, 4\) but x has shape \(2, 5, 4\): seq differs "
                        r"\(6 != 5\)"),
        ((6, 2), "concat", r"p has shape \(6, 2\) but x has shape \(2, 5, 4\): seq differs"),
        ((5, 3), "add", r"p has shape \(5, 3\) but x has shape \(2, 5, 4\): mode='add' needs "
                        r"the same feature width \(3 != 4\)"),
        ((5, 8), "scale", r"mode='scale' needs the same feature width \(8 != 4\)"),
        ((5, 3), "multiply", r"mode='multiply' needs the same feature width"),
        ((1, 2, 5, 4), "add", r"p has shape \(1, 2, 5, 4\) but x has shape \(2, 5, 4\): p has "
                              r"more axes than x"),
        ((3, 5, 4), "add", r"p has shape \(3, 5, 4\) but x has shape \(2, 5, 4\): p's leading "
                           r"axes \(3,\) do not broadcast to x's \(2,\)"),
        ((3, 5, 2), "concat", r"p's leading axes \(3,\) do not broadcast to x's \(2,\)"),
        ((4,), "add", r"p must have shape \[..., seq, dim_p\], got shape \(4,\)"),
    ],
)
def test_shape_mismatches_name_both_shapes(pe, p_shape, mode, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.combine(X, np.zeros(p_shape), mode=mode)


def test_one_dimensional_x(pe) -> None:
    with pytest.raises(ParameterError, match=r"x must have shape \[..., seq, dim\], got shape "
                                             r"\(4,\)"):
        pe.combine(np.zeros(4), np.zeros((1, 4)))


def test_right_aligned_leading_axes_are_accepted(pe) -> None:
    x = np.ones((2, 3, 5, 4))
    assert tuple(pe.combine(x, np.ones((3, 5, 4))).shape) == (2, 3, 5, 4)
    assert tuple(pe.combine(x, np.ones((2, 1, 5, 4))).shape) == (2, 3, 5, 4)
    assert tuple(pe.combine(x, np.ones((1, 5, 2)), mode="concat").shape) == (2, 3, 5, 6)


def test_mixed_dtypes_name_both(pe) -> None:
    # JAX without 64-bit mode turns float64 into float32, so it gets a float16 p instead
    other = "float16" if pe.__name__.endswith(".jax") else "float64"
    with pytest.raises(ParameterError, match=rf"x has dtype float32 but p has dtype {other}"):
        pe.combine(X.astype(np.float32), np.zeros((5, 4), dtype=other))


def test_integer_inputs(pe) -> None:
    with pytest.raises(ParameterError, match=r"x must have a real floating dtype, got int"):
        pe.combine(np.zeros((2, 5, 4), dtype=np.int64), np.zeros((5, 4)))
    with pytest.raises(ParameterError, match=r"p must have a real floating dtype, got int"):
        pe.combine(X, np.zeros((5, 4), dtype=np.int64))


def test_mixed_array_libraries() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(MixedArrayLibrariesError, match=r"x is a torch array, p is a numpy array"):
        posenc.combine(torch.zeros(2, 5, 4), np.zeros((5, 4)))


def test_p_must_be_an_array() -> None:
    with pytest.raises(ParameterError, match=r"p must be an array, got list"):
        posenc.combine(X, [[0.0] * 4] * 5)


def test_scale_keeps_the_low_bits_of_a_small_p() -> None:
    """bfloat16 (8 significant bits): 1 + 11·2^-12 is 1 in bfloat16, yet 1.5·(1 + 11·2^-12) =
    1.50403 lies above the midpoint 1.50391 of its neighbours 1.5 and 1.5078125."""
    torch = pytest.importorskip("torch")
    x = torch.tensor([[1.5]], dtype=torch.bfloat16)
    p = torch.tensor([[11 * 2**-12]], dtype=torch.bfloat16)
    assert (1 + p).item() == 1.0  # what a bfloat16 computation of 1 + p would use
    out = posenc.combine(x, p, mode="scale")
    assert out.dtype == torch.bfloat16
    assert out.item() == 1.5078125


# --------------------------------------------------------------------------------------------
# goldens against torch's operators (float64, one rounding each: bit-identical)
# --------------------------------------------------------------------------------------------

SPEC = specs()["combine"]


@pytest.mark.oracle
@pytest.mark.parametrize("name", [c.name for c in SPEC.cases])
def test_golden_vs_torch_operators(name: str) -> None:
    torch = pytest.importorskip("torch")
    case = golden.load(SPEC).cases[name]
    mode = resolve_params(SPEC, case.params)["mode"]
    x, p = (torch.from_numpy(case.inputs[k]) for k in ("x", "p"))
    if mode == "add":
        expected = torch.add(x, p)
    elif mode == "multiply":
        expected = torch.mul(x, p)
    elif mode == "scale":  # bert4keras merge_mode='mul': inputs * (embeddings + 1.0)
        expected = x * (p + 1.0)
    else:
        expected = torch.cat([x, p.expand(*x.shape[:-1], p.shape[-1])], dim=-1)
    assert expected.dtype == torch.float64
    np.testing.assert_array_equal(case.output, expected.numpy(), err_msg=f"combine/{name}")
