"""Axial RoPE: bad inputs on every backend, every golden against a transcription of FLUX's
EmbedND / rope / apply_rope, against transformers' Qwen2-VL vision rotary (half layout) and
rotary-embedding-torch's axial frequencies (interleaved), and broken implementations that the
properties catch."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

with contextlib.suppress(ImportError):
    import torch  # noqa: F401  (before TensorFlow, which has crashed when imported first)

import posenc
from posenc import golden
from posenc.catalog import specs
from posenc.encodings import public_functions
from posenc.errors import ParameterError
from posenc.specs import resolve_params

from ..failing import failing_properties

X16 = np.linspace(-1, 1, 2 * 6 * 16).reshape(2, 6, 16)
GRID = np.stack(np.meshgrid(np.arange(2), np.arange(3), indexing="ij"), -1).reshape(6, 2)

# --------------------------------------------------------------------------------------------
# bad inputs
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"axes_dims": [8]}, r"axes_dims=\[8\] has 1 entries but positions have 2 axes"),
        ({"axes_dims": [8, 7]}, r"axes_dims\[1\]=7 must be even and >= 2"),
        ({"axes_dims": [8, 0]}, r"axes_dims\[1\]=0 must be even and >= 2"),
        ({"axes_dims": [8, -2]}, r"axes_dims\[1\]=-2 must be even and >= 2"),
        ({"axes_dims": [8.0, 8]}, r"axes_dims\[0\]=8.0 is not an int"),
        ({"axes_dims": [8, 10]}, r"axes_dims=\[8, 10\] sum to 18, more than x.shape\[-1\]=16"),
        ({"axes_dims": 8}, r"axes_dims=8 must be a list of 2 even ints"),
        ({"layout": "neox"}, r"layout='neox' is not one of"),
        ({"base": 0.5}, r"base=0.5 must be > 1"),
    ],
)
def test_bad_parameters_raise_a_parameter_error_naming_them(pe, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.axial_rope(X16, GRID, **kwargs)


@pytest.mark.parametrize(
    ("x", "positions", "message"),
    [
        (X16, np.arange(6), r"positions has shape \(6,\) but x has shape \(2, 6, 16\)"),
        (X16, GRID[:5], r"positions has shape \(5, 2\) .* \[seq, n_axes\] = \[6, n_axes\]"),
        (X16, np.zeros((6, 0), np.int64), r"positions has shape \(6, 0\)"),
        (X16, np.zeros((3, 6, 2), np.int64), r"\[batch, seq, n_axes\] = \[2, 6, n_axes\]"),
        (X16[0], np.zeros((1, 6, 2), np.int64), r"batched needs x.ndim >= 3"),
        (X16[0, 0], GRID[:1], r"x must have shape \[..., seq, dim\], got shape \(16,\)"),
        (X16[..., :12], np.zeros((6, 4), np.int64),
         r"x.shape\[-1\]=12 does not split into 4 even per-axis widths"),
        (np.ones((2, 6, 16), np.int64), GRID, r"x must have a real floating dtype, got int(32|64)"),
        (X16, GRID > 0, r"positions must have an integer dtype .* got bool"),
        (X16.astype(np.float32), GRID - 2**24 - 1, r"positions contains -16777217, beyond 2\*\*24"),
    ],
)
def test_bad_arrays_raise_a_parameter_error_naming_them(pe, x, positions, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.axial_rope(x, positions)


def test_positions_are_required(pe) -> None:
    with pytest.raises(ParameterError, match=r"positions=None: axial_rope needs"):
        pe.axial_rope(X16, None)


# --------------------------------------------------------------------------------------------
# FLUX.1, transcribed from black-forest-labs/flux
#   https://github.com/black-forest-labs/flux/blob/main/src/flux/math.py  (rope, apply_rope)
#   https://github.com/black-forest-labs/flux/blob/main/src/flux/modules/layers.py  (EmbedND)
# in float64 (FLUX computes in the dtype of its ids and applies in float32).
# --------------------------------------------------------------------------------------------


def _flux_rope(pos, dim: int, theta: float):
    import torch

    assert dim % 2 == 0
    scale = torch.arange(0, dim, 2, dtype=pos.dtype, device=pos.device) / dim
    omega = 1.0 / (theta**scale)
    out = torch.einsum("...n,d->...nd", pos, omega)
    out = torch.stack([torch.cos(out), -torch.sin(out), torch.sin(out), torch.cos(out)], dim=-1)
    return out.reshape(*out.shape[:-1], 2, 2)  # rearrange "b n d (i j) -> b n d i j"


def _flux_embed_nd(ids, theta: float, axes_dim: list[int]):
    n_axes = ids.shape[-1]
    import torch

    return torch.cat([_flux_rope(ids[..., i], axes_dim[i], theta) for i in range(n_axes)],
                     dim=-3)


def _flux_apply_rope(xq, freqs_cis):
    xq_ = xq.reshape(*xq.shape[:-1], -1, 1, 2)
    xq_out = freqs_cis[..., 0] * xq_[..., 0] + freqs_cis[..., 1] * xq_[..., 1]
    return xq_out.reshape(*xq.shape)


def _flux(x: np.ndarray, positions: np.ndarray, axes_dims: list[int], base: float,
          layout: str) -> np.ndarray:
    """FLUX on the rotated width; half layout through the channel permutation that maps its
    pairs (j, j + r/2) to FLUX's (2j, 2j + 1)."""
    import torch

    r = sum(axes_dims)
    head = x[..., :r]
    order = np.arange(r)
    if layout == "half":
        order = np.stack([np.arange(r // 2), np.arange(r // 2) + r // 2], -1).reshape(-1)
    pe = _flux_embed_nd(torch.tensor(positions, dtype=torch.float64), base, axes_dims)
    if positions.ndim == 3:  # [batch, seq, ...] against x [batch, heads, seq, r]
        pe = pe.reshape(pe.shape[0], *([1] * (x.ndim - 3)), *pe.shape[1:])
    out = _flux_apply_rope(torch.tensor(head[..., order]), pe).numpy()[..., np.argsort(order)]
    return np.concatenate([out, x[..., r:]], axis=-1)


def _cases():
    spec = specs()["axial_rope"]
    for name, case in golden.load(spec).cases.items():
        p = resolve_params(spec, case.params)
        x, pos = case.inputs["x"], case.inputs["positions"]
        n_axes = pos.shape[-1]
        dims = p["axes_dims"] or [x.shape[-1] // n_axes] * n_axes
        yield name, case, p, dims


@pytest.mark.oracle
def test_every_golden_vs_flux() -> None:
    pytest.importorskip("torch")
    compared = 0
    for name, case, p, dims in _cases():
        x, pos = case.inputs["x"], case.inputs["positions"]
        theirs = _flux(x, pos, dims, p["base"], p["layout"])
        atol = 1e-15 * 16 * max(1.0, float(np.abs(pos).max()))
        np.testing.assert_allclose(case.output, theirs, rtol=0, atol=atol, err_msg=name)
        compared += 1
    assert compared >= 8


@pytest.mark.oracle
def test_flux_embed_nd_head_128_float32() -> None:
    """posenc.axial_rope in float32 on FLUX.1's own setting (ids (0, row, col) of a 64 x 64
    latent, axes_dim [16, 56, 56]) against the float64 transcription."""
    pytest.importorskip("torch")
    rows, cols = np.meshgrid(np.arange(64), np.arange(64), indexing="ij")
    ids = np.stack([np.zeros(64 * 64, np.int64), rows.ravel(), cols.ravel()], -1)
    x = np.random.default_rng(0).standard_normal((1, 2, 64 * 64, 128)).astype(np.float32)
    ours = posenc.axial_rope(x, ids, axes_dims=[16, 56, 56], layout="interleaved")
    theirs = _flux(x.astype(np.float64), ids, [16, 56, 56], 10000.0, "interleaved")
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=3e-6)


# --------------------------------------------------------------------------------------------
# transformers' Qwen2-VL vision rotary (half layout, two axes of head_dim / 2)
# --------------------------------------------------------------------------------------------


def _qwen2_vl_vision(x: np.ndarray, positions: np.ndarray, base: float) -> np.ndarray:
    """Its recomposition (cat(freq_h, freq_w) twice) and rotate_half, with the frequencies of
    compute_axial_rope_parameters built in float64 (it keeps them in float32)."""
    import torch

    q2 = pytest.importorskip("transformers.models.qwen2_vl.modeling_qwen2_vl")
    dim = x.shape[-1]
    config = SimpleNamespace(rope_parameters={"rope_type": "axial", "rope_theta": base},
                             head_dim=dim, embed_dim=dim, num_attention_heads=1)
    module = q2.Qwen2VLVisionRotaryEmbedding(config)
    spatial = dim // 2
    inv_freq = 1.0 / (base ** (torch.arange(0, spatial, 2, dtype=torch.float64) / spatial))
    assert inv_freq.shape == module.inv_freq.shape
    freqs = torch.tensor(positions, dtype=torch.float64)[..., None] * inv_freq  # [seq, 2, d/4]
    cos = module.recomposition_frequencies(freqs.cos())
    sin = module.recomposition_frequencies(freqs.sin())
    t = torch.tensor(x)
    return (t * cos + q2.rotate_half(t) * sin).numpy()


@pytest.mark.oracle
def test_half_goldens_vs_qwen2_vl_vision() -> None:
    pytest.importorskip("torch")
    compared = 0
    for name, case, p, dims in _cases():
        x, pos = case.inputs["x"], case.inputs["positions"]
        if (p["layout"] != "half" or pos.ndim != 2 or pos.shape[-1] != 2
                or dims != [x.shape[-1] // 2] * 2):
            continue
        np.testing.assert_allclose(case.output, _qwen2_vl_vision(x, pos, p["base"]), rtol=0,
                                   atol=1e-13, err_msg=name)
        compared += 1
    assert compared >= 1


@pytest.mark.oracle
def test_qwen2_vl_vision_large_coordinates() -> None:
    pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 9, 32))
    pos = rng.integers(0, 1_000_000, (9, 2))
    ours64 = posenc.axial_rope(x, pos)
    ours32 = posenc.axial_rope(x.astype(np.float32), pos)
    theirs = _qwen2_vl_vision(x, pos, 10000.0)
    np.testing.assert_allclose(ours64, theirs, rtol=0, atol=1e-9)
    np.testing.assert_allclose(ours32, theirs, rtol=0, atol=3e-6)


# --------------------------------------------------------------------------------------------
# rotary-embedding-torch (interleaved, equal widths, full grids)
# --------------------------------------------------------------------------------------------


def _lucidrains(x: np.ndarray, shape: tuple[int, ...], base: float, offsets=None) -> np.ndarray:
    """get_axial_freqs over the grid arange(n) (+ offsets) of each axis, applied with its
    apply_rotary_emb; its frequencies are float32 parameters."""
    import torch

    ret = pytest.importorskip("rotary_embedding_torch")
    width = x.shape[-1] // len(shape)
    rot = ret.RotaryEmbedding(dim=width, theta=base, freqs_for="lang")
    freqs = rot.get_axial_freqs(*shape, offsets=offsets).double()  # [*shape, dim]
    freqs = freqs.reshape(-1, freqs.shape[-1])
    return ret.apply_rotary_emb(freqs, torch.tensor(x), seq_dim=-2).numpy()


def _grid(shape: tuple[int, ...]) -> np.ndarray:
    axes = np.meshgrid(*[np.arange(n) for n in shape], indexing="ij")
    return np.stack([a.ravel() for a in axes], -1)


@pytest.mark.oracle
def test_interleaved_grid_goldens_vs_rotary_embedding_torch() -> None:
    pytest.importorskip("torch")
    compared = 0
    for name, case, p, dims in _cases():
        x, pos = case.inputs["x"], case.inputs["positions"]
        if p["layout"] != "interleaved" or pos.ndim != 2 or len(set(dims)) != 1 \
                or sum(dims) != x.shape[-1]:
            continue
        shape = tuple(int(n) for n in pos.max(axis=0) + 1)
        if not np.array_equal(pos, _grid(shape)):
            continue
        np.testing.assert_allclose(case.output, _lucidrains(x, shape, p["base"]), rtol=0,
                                   atol=1e-6, err_msg=name)
        compared += 1
    assert compared >= 1


@pytest.mark.oracle
def test_video_grid_with_offsets_vs_rotary_embedding_torch() -> None:
    pytest.importorskip("torch")
    shape, offsets = (2, 3, 4), (5, 100, 7)
    x = np.random.default_rng(6).standard_normal((2, 24, 24))
    pos = _grid(shape) + np.array(offsets)
    ours = posenc.axial_rope(x, pos, layout="interleaved")
    np.testing.assert_allclose(ours, _lucidrains(x, shape, 10000.0, offsets), rtol=0, atol=1e-5)


# --------------------------------------------------------------------------------------------
# broken implementations
# --------------------------------------------------------------------------------------------

_IMPL = public_functions()


def _per_block_half(x: Any, positions: Any, *, axes_dims: Any = None, layout: str = "half",
                    **kw: Any) -> Any:
    """Half layout inside each axis' contiguous block (pairs (o + i, o + i + d_a/2)): another
    convention, not transformers'."""
    if layout != "half":
        return _IMPL["axial_rope"](x, positions, axes_dims=axes_dims, layout=layout, **kw)
    n_axes = np.asarray(positions).shape[-1]
    dims = axes_dims or [x.shape[-1] // n_axes] * n_axes
    order, start = [], 0
    for d in dims:
        order += [k for i in range(d // 2) for k in (start + i, start + i + d // 2)]
        start += d
    order = np.array(order + list(range(start, x.shape[-1])))
    out = _IMPL["axial_rope"](np.asarray(x)[..., order], positions, axes_dims=dims,
                              layout="interleaved", **kw)
    return out[..., np.argsort(order)]


def _axes_reversed(x: Any, positions: Any, **kw: Any) -> Any:
    return _IMPL["axial_rope"](x, np.asarray(positions)[..., ::-1], **kw)


def _failing(**overrides: Any) -> set[str]:
    return failing_properties(["axial_rope"], max_examples=4, name="broken_axial", **overrides)


def test_unbroken_backend_passes_the_properties() -> None:
    assert _failing() == set()


def test_per_block_half_pairing_is_caught() -> None:
    assert _failing(axial_rope=_per_block_half) == {"axial_one_row_is_rope",
                                                   "axial_layout_permutation"}


def test_reversed_axes_are_caught() -> None:
    assert {"axial_one_row_is_rope", "axial_one_row_is_rope[layout=interleaved]"} <= \
        _failing(axial_rope=_axes_reversed)
