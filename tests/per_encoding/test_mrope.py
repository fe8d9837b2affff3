"""Multimodal RoPE: bad inputs on every backend, every golden against transformers' Qwen2-VL and
Qwen3-VL frequency recomposition, and broken implementations that the properties catch."""

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
from posenc.rotary.schedules import frequencies, rotary_width
from posenc.specs import resolve_params

from ..failing import failing_properties
from ..mrope_oracles import ordering_of

X16 = np.linspace(-1, 1, 2 * 5 * 16).reshape(2, 5, 16)
POS = np.arange(15).reshape(3, 5)

# --------------------------------------------------------------------------------------------
# bad inputs
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sections": [2, 3, 2]}, r"sections=\[2, 3, 2\] sum to 7, .* must sum to 8"),
        ({"sections": [4, -1, 5]}, r"sections\[1\]=-1 is negative"),
        ({"sections": [4, 4]},
         r"sections=\[4, 4\] with ordering='contiguous' reads 2 rows of position ids"),
        ({"sections": 8}, r"sections=8 must be a non-empty list of ints"),
        ({"sections": [2.0, 3, 3]}, r"sections\[0\]=2.0 is not an int"),
        ({}, r"sections=None: pass sections=\[t, h, w\]"),
        ({"scaling": {"rope_type": "default"}}, r"sections=None and scaling has no 'mrope_section'"),
        ({"sections": [2, 3, 3], "scaling": {"mrope_section": [3, 3, 2]}},
         r"sections=\[2, 3, 3\] conflicts with scaling\['mrope_section'\]=\[3, 3, 2\]"),
        ({"sections": [2, 3, 3], "interleaved": True},
         r"sections=\[2, 3, 3\] with interleaved=True: .* counts \[3, 3, 2\]"),
        ({"sections": [2, 3, 3], "interleaved": "yes"}, r"interleaved must be a bool, got 'yes'"),
        ({"scaling": {"mrope_section": [4, 2, 2], "mrope_interleaved": 1}},
         r"scaling\['mrope_interleaved'\] must be a bool, got 1"),
        ({"sections": [2, 3, 3], "layout": "neox"}, r"layout='neox' is not one of"),
        ({"sections": [2, 3, 3], "base": 1.0}, r"base=1.0 must be > 1"),
        ({"scaling": {"rope_type": "dynamic", "factor": 2.0, "mrope_section": [2, 3, 3]}},
         r"rope_type'\]='dynamic' depends on the current sequence length"),
        ({"scaling": {"rope_type": "magic", "mrope_section": [2, 3, 3]}},
         r"scaling\['rope_type'\]='magic' is not one of"),
        ({"base": 500000.0, "scaling": {"rope_theta": 1e6, "mrope_section": [2, 3, 3]}},
         r"base=500000.0 conflicts with scaling\['rope_theta'\]=1000000.0"),
        ({"scaling": [2, 3, 3]}, r"scaling must be a dict"),
    ],
)
def test_bad_parameters_raise_a_parameter_error_naming_them(pe, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.mrope(X16, POS, **kwargs)


@pytest.mark.parametrize(
    ("x", "positions", "message"),
    [
        (X16, np.arange(5), r"positions has shape \(5,\) but x has shape \(2, 5, 16\)"),
        (X16, np.arange(10).reshape(2, 5), r"positions has shape \(2, 5\) .* \[3, seq\] = \[3, 5\]"),
        (X16, np.zeros((4, 5), np.int64), r"sections=\[2, 3, 3\] .* reads 3 rows .* \(4, 5\)"),
        (X16[0], np.zeros((3, 1, 5), np.int64), r"positions has shape \(3, 1, 5\)"),
        (X16, np.zeros((3, 3, 5), np.int64), r"\[axes, batch, seq\] = \[axes, 2, 5\]"),
        (X16[0, 0], POS[:, :1], r"x must have shape \[..., seq, dim\], got shape \(16,\)"),
        (np.ones((2, 5, 16), np.int64), POS, r"x must have a real floating dtype, got int(32|64)"),
        (X16, POS > 3, r"positions must have an integer dtype .* got bool"),
        (X16.astype(np.float32), POS + 2**24, r"positions contains 16777230, beyond 2\*\*24"),
    ],
)
def test_bad_arrays_raise_a_parameter_error_naming_them(pe, x, positions, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.mrope(x, positions, sections=[2, 3, 3])


def test_odd_width_names_x(pe) -> None:
    with pytest.raises(ParameterError, match=r"x.shape\[-1\]=15 is odd"):
        pe.mrope(X16[..., :15], POS, sections=[2, 3, 3])


# --------------------------------------------------------------------------------------------
# behaviour beyond the goldens
# --------------------------------------------------------------------------------------------


def test_config_dicts_pass_as_is() -> None:
    """The Qwen2-VL rope_scaling and Qwen3-VL rope_parameters dicts select the same result as
    the explicit parameters."""
    x = np.random.default_rng(0).standard_normal((2, 7, 16))
    pos = np.random.default_rng(1).integers(0, 500, (3, 7))
    np.testing.assert_array_equal(
        posenc.mrope(x, pos, scaling={"type": "mrope", "mrope_section": [2, 3, 3]}),
        posenc.mrope(x, pos, sections=[2, 3, 3]))
    qwen3 = {"rope_type": "default", "mrope_section": [4, 2, 2], "mrope_interleaved": True,
             "rope_theta": 1e6}
    np.testing.assert_array_equal(
        posenc.mrope(x, pos, scaling=qwen3),
        posenc.mrope(x, pos, sections=[4, 2, 2], interleaved=True, base=1e6))


def test_equal_ids_equal_rope_on_every_backend(pe) -> None:
    """t = h = w: mrope is rope, on the backend's own arrays."""
    x = np.random.default_rng(2).standard_normal((2, 6, 16)).astype(np.float32)
    m = np.array([0, 3, 70000, 5, 123456, 9])
    out = pe.mrope(x, np.stack([m, m, m]), sections=[2, 3, 3], interleaved=False)
    ref = pe.rope(x, m)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), rtol=0, atol=2e-6)


# --------------------------------------------------------------------------------------------
# transformers
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def qwen():
    pytest.importorskip("torch")
    q2 = pytest.importorskip("transformers.models.qwen2_vl.modeling_qwen2_vl")
    q3 = pytest.importorskip("transformers.models.qwen3_vl.modeling_qwen3_vl")
    return q2, q3


def _transformers_mrope(qwen, x: np.ndarray, positions: np.ndarray, p: dict[str, Any]):
    """transformers' recomposition (which frequency follows t, h or w) and rotate_half applied
    to cos/sin built in float64 (its forward casts inv_freq to float32)."""
    import torch

    q2, q3 = qwen
    scaling = dict(p["scaling"] or {})
    sections = p["sections"] or scaling["mrope_section"]
    interleaved = p["interleaved"] or bool(scaling.get("mrope_interleaved", False))
    dim = x.shape[-1]
    r = rotary_width(dim, p["scaling"])
    # the frequency schedule itself is checked against transformers in the rope tests
    inv_freq, attention = frequencies(r, p["base"], p["scaling"], int(positions.max()) + 1)
    config = SimpleNamespace(
        max_position_embeddings=4096, head_dim=r, hidden_size=r, num_attention_heads=1,
        rope_parameters={"rope_type": "default", "rope_theta": p["base"],
                         "mrope_section": list(sections)})
    cls = q3.Qwen3VLTextRotaryEmbedding if interleaved else q2.Qwen2VLRotaryEmbedding
    module = cls(config)
    pos = torch.tensor(positions if positions.ndim == 3 else positions[:, None, :])
    freqs = pos[..., None].double() * torch.tensor(np.asarray(inv_freq, np.float64))
    cos = module.recomposition_frequencies(freqs.cos()) * attention
    sin = module.recomposition_frequencies(freqs.sin()) * attention
    head = x[..., :r]
    perm = None
    if p["layout"] == "interleaved":  # interleaved pairs = half pairs after a channel permutation
        perm = np.concatenate([np.arange(0, r, 2), np.arange(1, r, 2)])
        head = head[..., perm]
    h = torch.tensor(head)
    if positions.ndim == 2:  # [1, seq, r] against x [..., seq, r]
        cos, sin = cos[0], sin[0]
    else:  # [batch, seq, r] against x [batch, heads, seq, r]
        cos, sin = cos[:, None], sin[:, None]
    out = (h * cos + q2.rotate_half(h) * sin).numpy()
    if perm is not None:
        out = out[..., np.argsort(perm)]
    return np.concatenate([out, x[..., r:]], axis=-1)


@pytest.mark.oracle
def test_every_golden_vs_transformers(qwen) -> None:
    spec = specs()["mrope"]
    cases = golden.load(spec).cases
    assert len(cases) >= 8
    for name, case in cases.items():
        p = resolve_params(spec, case.params)
        ordering, sections = ordering_of(p)
        if ordering not in ("contiguous", "interleaved") or len(sections) != 3:
            continue  # the other orderings: tests/per_encoding/test_mrope_orderings.py
        theirs = _transformers_mrope(qwen, case.inputs["x"], case.inputs["positions"], p)
        scale = max(1.0, float(np.abs(case.inputs["positions"]).max()))
        np.testing.assert_allclose(case.output, theirs, rtol=0, atol=1e-15 * 16 * scale,
                                   err_msg=name)


@pytest.mark.oracle
def test_qwen2_vl_forward_at_small_positions(qwen) -> None:
    """Qwen2VLRotaryEmbedding.forward end to end (its float32 angles are exact enough below
    position 64) against posenc.mrope."""
    import torch

    q2, _ = qwen
    config = SimpleNamespace(max_position_embeddings=4096, head_dim=32, hidden_size=32,
                             num_attention_heads=1,
                             rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                              "mrope_section": [4, 6, 6]})
    x = np.random.default_rng(3).standard_normal((2, 3, 9, 32)).astype(np.float32)
    pos = np.random.default_rng(4).integers(0, 64, (3, 2, 9))
    xt = torch.tensor(x)
    cos, sin = q2.Qwen2VLRotaryEmbedding(config)(xt, torch.tensor(pos))
    theirs, _ = q2.apply_rotary_pos_emb(xt, xt, cos, sin)
    ours = posenc.mrope(x, pos, sections=[4, 6, 6])
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=0, atol=2e-5)


# --------------------------------------------------------------------------------------------
# broken implementations
# --------------------------------------------------------------------------------------------

_IMPL = public_functions()


def _h_and_w_swapped(x: Any, positions: Any, **kw: Any) -> Any:
    return _IMPL["mrope"](x, np.asarray(positions)[[0, 2, 1]], **kw)


def _interleaving_ignored(x: Any, positions: Any, *, interleaved: bool = False, **kw: Any) -> Any:
    sections = kw.pop("sections", None)
    if interleaved and sections is not None:  # the Qwen2-VL runs with Qwen3-VL's counts
        return _IMPL["mrope"](x, positions, sections=sections, **kw)
    return _IMPL["mrope"](x, positions, sections=sections, interleaved=interleaved, **kw)


def _per_section_frequencies(x: Any, positions: Any, **kw: Any) -> Any:
    """A wrong rope_theta: the frequencies are no longer those of 1-D rope."""
    return _IMPL["mrope"](x, positions, **{**kw, "base": kw.get("base", 10000.0) * 2})


def _failing(**overrides: Any) -> set[str]:
    return failing_properties(["mrope"], name="broken_mrope", **overrides)


def test_unbroken_backend_passes_the_properties() -> None:
    assert _failing() == set()


def test_swapped_h_and_w_fail_section_isolation() -> None:
    assert {"mrope_section_isolation", "mrope_section_isolation[interleaved=True]",
            "mrope_section_isolation[layout=interleaved]"} <= _failing(mrope=_h_and_w_swapped)


def test_ignored_interleaving_fails_only_the_interleaved_checks() -> None:
    assert _failing(mrope=_interleaving_ignored) == {"mrope_section_isolation[interleaved=True]"}


def test_wrong_frequencies_fail_equal_axes() -> None:
    assert {"mrope_equal_axes_is_rope",
            "mrope_equal_axes_is_rope[interleaved=True,layout=interleaved]"} <= \
        _failing(mrope=_per_section_frequencies)
