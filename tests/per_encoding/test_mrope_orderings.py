"""The M-RoPE orderings beyond Qwen2-VL and Qwen3-VL: every ERNIE 4.5-VL and HunYuan XD-RoPE
golden against transformers' own rotary embeddings, Bailing and vLLM's XD-RoPE against
transcriptions of vLLM's code, and the parameter rules."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

with contextlib.suppress(ImportError):
    import torch  # noqa: F401  (before TensorFlow, which has crashed when imported first)

import posenc
from posenc import golden
from posenc.catalog import specs
from posenc.errors import ParameterError
from posenc.reference.mrope import mrope as reference_mrope
from posenc.specs import resolve_params

from .. import mrope_oracles as oracle


def _cases(*orderings: str):
    spec = specs()["mrope"]
    out = []
    for name, case in golden.load(spec).cases.items():
        p = resolve_params(spec, case.params)
        ordering, sections = oracle.ordering_of(p)
        if ordering in orderings:
            out.append((name, case, p, sections))
    assert out, orderings
    return out


def _check(name: str, case, p, theirs: np.ndarray) -> None:
    """The golden (the reference) and posenc.mrope both agree with ``theirs``."""
    scale = max(1.0, float(np.abs(case.inputs["positions"]).max()))
    atol = 1e-15 * 16 * scale
    np.testing.assert_allclose(case.output, theirs, rtol=0, atol=atol, err_msg=name)
    ours = posenc.mrope(case.inputs["x"], case.inputs["positions"], **p)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=atol, err_msg=name)


def _batched(positions: np.ndarray) -> tuple[np.ndarray, bool]:
    return (positions, True) if positions.ndim == 3 else (positions[:, None, :], False)


# --------------------------------------------------------------------------------------------
# ERNIE 4.5-VL (transformers)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ernie():
    pytest.importorskip("torch")
    return pytest.importorskip("transformers.models.ernie4_5_vl_moe.modeling_ernie4_5_vl_moe")


def _ernie_rotary(ernie, r: int, base: float, sections: list[int]):
    import torch

    module = ernie.Ernie4_5_VLMoeTextRotaryEmbedding(oracle.config(r, base, sections))
    # their inv_freq is pre-permuted (even frequencies, then odd): read the permutation off it
    plain = 1.0 / (base ** (torch.arange(0, r, 2, dtype=torch.float) / r))
    perm = [int(np.flatnonzero(plain.numpy() == f)[0]) for f in module.inv_freq.numpy()]
    assert sorted(perm) == list(range(r // 2))
    return module, perm


@pytest.mark.oracle
def test_ernie_goldens_vs_transformers(ernie) -> None:
    for name, case, p, sections in _cases("ernie"):
        x, positions = case.inputs["x"], case.inputs["positions"]
        r, inv_freq, attention = oracle.schedule(x, positions, p)
        module, perm = _ernie_rotary(ernie, r, float(p["base"] if p["scaling"] is None
                                                     else p["scaling"]["rope_theta"]), sections)
        pos, batched = _batched(positions)
        freqs = oracle.float64_freqs(pos, np.asarray(inv_freq)[perm])
        cos = module.recomposition_frequencies(freqs.cos()) * attention
        sin = module.recomposition_frequencies(freqs.sin()) * attention
        assert p["layout"] == "interleaved"  # ERNIE pairs (2j, 2j+1): rotate_half_text
        theirs = oracle.rotate(x, r, cos, sin, ernie.rotate_half_text, batched)
        _check(name, case, p, theirs)


@pytest.mark.oracle
def test_ernie_forward_at_small_positions(ernie) -> None:
    """Their forward and apply_rotary_pos_emb end to end (float32 angles, exact enough below
    position 64) against posenc.mrope with ordering ernie and pairs (2j, 2j+1)."""
    import torch

    module, _ = _ernie_rotary(ernie, 32, 500000.0, [6, 6, 4])
    x = np.random.default_rng(5).standard_normal((2, 3, 9, 32)).astype(np.float32)
    pos = np.random.default_rng(6).integers(0, 64, (3, 2, 9))
    xt = torch.tensor(x)
    cos, sin = module(xt, torch.tensor(pos))
    theirs, _ = ernie.apply_rotary_pos_emb(xt, xt, cos, sin)
    ours = posenc.mrope(x, pos, sections=[6, 6, 4], ordering="ernie", base=500000.0,
                        layout="interleaved")
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=0, atol=2e-5)
    qwen_style = posenc.mrope(x, pos, sections=[6, 6, 4], base=500000.0, layout="interleaved")
    assert np.abs(qwen_style - theirs.numpy()).max() > 1e-2  # the config read as Qwen2-VL's


# --------------------------------------------------------------------------------------------
# HunYuan XD-RoPE (transformers)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hunyuan():
    pytest.importorskip("torch")
    return pytest.importorskip("transformers.models.hunyuan_vl.modeling_hunyuan_vl")


@pytest.mark.oracle
def test_xdrope_goldens_vs_transformers(hunyuan) -> None:
    for name, case, p, sections in _cases("xdrope"):
        x, positions = case.inputs["x"], case.inputs["positions"]
        r, inv_freq, attention = oracle.schedule(x, positions, p)
        module = hunyuan.HunYuanVLRotaryEmbedding(oracle.config(r, p["base"], sections))
        pos, batched = _batched(positions)
        freqs = oracle.float64_freqs(pos, inv_freq)
        cos = module.recomposition_frequencies(freqs.cos()) * attention
        sin = module.recomposition_frequencies(freqs.sin()) * attention
        theirs = oracle.rotate(x, r, cos, sin, hunyuan.rotate_half, batched, p["layout"])
        if p["layout"] == "interleaved":
            continue  # their code pairs half; the interleaved case is the reference's own
        _check(name, case, p, theirs)


@pytest.mark.oracle
def test_xdrope_forward_at_small_positions(hunyuan) -> None:
    import torch

    config = oracle.config(32, 10000.0, [4, 4, 4, 4])
    module = hunyuan.HunYuanVLRotaryEmbedding(config)
    x = np.random.default_rng(7).standard_normal((2, 3, 9, 32)).astype(np.float32)
    pos = np.random.default_rng(8).integers(0, 64, (4, 2, 9))
    xt = torch.tensor(x)
    cos, sin = module(xt, torch.tensor(pos))
    theirs, _ = hunyuan.apply_rotary_pos_emb(xt, xt, cos, sin)
    ours = posenc.mrope(x, pos, sections=[4, 4, 4, 4], ordering="xdrope")
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=0, atol=2e-5)
    vllm_style = posenc.mrope(x, pos, sections=[4, 4, 4, 4], ordering="contiguous")
    assert np.abs(vllm_style - theirs.numpy()).max() > 1e-2


# --------------------------------------------------------------------------------------------
# vLLM: Bailing and XDRotaryEmbedding, transcribed (vLLM is not installed here)
# --------------------------------------------------------------------------------------------


def _vllm_select(ordering: str, sections: list[int], cos: np.ndarray) -> np.ndarray:
    """cos [axes, seq, n] (each row's cache look-up) -> [seq, n]. Bailing: vLLM's
    BailingMRotaryEmbedding.select_cos_sin (the first 2 s_h frequencies from h where the
    index is even, else w; the rest from t); XD-RoPE: XDRotaryEmbedding.forward_native
    (cos.split(xdrope_section) and chunk i from row i)."""
    if ordering == "bailing":
        spatial = sections[1] + sections[2]
        even = np.arange(spatial) % 2 == 0
        return np.concatenate([np.where(even, cos[1, :, :spatial], cos[2, :, :spatial]),
                               cos[0, :, spatial:]], axis=-1)
    bounds = np.cumsum([0, *sections])
    return np.concatenate([cos[i, :, bounds[i]:bounds[i + 1]] for i in range(len(sections))],
                          axis=-1)


def test_bailing_matches_vllm_unit_test_expectation() -> None:
    """vLLM's test_bailing_mrope_selects_alternating_spatial_then_temporal: a cache whose entry
    is 10 * position + frequency, positions [[1, 2], [3, 4], [5, 6]], sections [2, 2, 2]."""
    positions = np.array([[1, 2], [3, 4], [5, 6]])
    table = positions[..., None] * 10 + np.arange(6)  # [axes, seq, n]
    expected = np.array([[30, 51, 32, 53, 14, 15], [40, 61, 42, 63, 24, 25]])
    np.testing.assert_array_equal(_vllm_select("bailing", [2, 2, 2], table), expected)
    # posenc's reference at frequency-independent angles: row r of feature j shows in x's output
    x = np.zeros((2, 12))
    x[:, 6:] = 1.0  # b features only: out_a = -sin(p theta_j)
    out = reference_mrope(x, positions, sections=[2, 2, 2], ordering="bailing",
                          interleaved=False, base=10000.0, layout="half", scaling=None)
    theta = 10000.0 ** (-np.arange(6) / 6)
    rows = expected // 10
    np.testing.assert_allclose(out[:, :6], -np.sin(rows * theta), rtol=0, atol=1e-15)


@pytest.mark.parametrize("ordering", ["bailing", "contiguous"])
def test_vllm_transcriptions_vs_goldens(ordering: str) -> None:
    names = {"bailing": ("bailing_head_64", "bailing_interleaved_layout"),
             "contiguous": ("hunyuan_vllm_contiguous",)}[ordering]
    for name, case, p, sections in _cases(ordering):
        if name not in names:
            continue
        x, positions = case.inputs["x"], case.inputs["positions"]
        r, inv_freq, _ = oracle.schedule(x, positions, p)
        angles = positions[..., None] * np.asarray(inv_freq)  # [axes, seq, n]
        cos = _vllm_select(ordering, sections, np.cos(angles))
        sin = _vllm_select(ordering, sections, np.sin(angles))
        n = r // 2
        a, b = ((np.arange(0, r, 2), np.arange(1, r, 2)) if p["layout"] == "interleaved"
                else (np.arange(n), np.arange(n, r)))
        theirs = x.copy()
        theirs[..., a] = x[..., a] * cos - x[..., b] * sin
        theirs[..., b] = x[..., b] * cos + x[..., a] * sin
        _check(name, case, p, theirs)


# --------------------------------------------------------------------------------------------
# behaviour and parameters
# --------------------------------------------------------------------------------------------

X = np.random.default_rng(9).standard_normal((2, 5, 16))
P3 = np.random.default_rng(10).integers(0, 500, (3, 5))
P4 = np.random.default_rng(11).integers(0, 500, (4, 5))


def test_ernie_and_bailing_differ_only_in_section_order() -> None:
    np.testing.assert_array_equal(posenc.mrope(X, P3, sections=[3, 3, 2], ordering="ernie"),
                                  posenc.mrope(X, P3, sections=[2, 3, 3], ordering="bailing"))
    assert not np.allclose(posenc.mrope(X, P3, sections=[2, 3, 3], ordering="bailing"),
                           posenc.mrope(X, P3, sections=[2, 3, 3]))


def test_config_dicts_name_the_ordering() -> None:
    ernie = {"rope_type": "default", "mrope_section": [3, 3, 2], "model_type": "ernie4_5_vl_moe"}
    np.testing.assert_array_equal(posenc.mrope(X, P3, scaling=ernie),
                                  posenc.mrope(X, P3, sections=[3, 3, 2], ordering="ernie"))
    ming = {"mrope_section": [2, 3, 3], "model_type": "bailing_moe_v2"}
    np.testing.assert_array_equal(posenc.mrope(X, P3, scaling=ming),
                                  posenc.mrope(X, P3, sections=[2, 3, 3], ordering="bailing"))
    for cfg in ({"xdrope_section": [2, 2, 2, 2]},
                {"mrope_section": [2, 2, 2, 2], "model_type": "hunyuan_vl_text"}):
        np.testing.assert_array_equal(posenc.mrope(X, P4, scaling=cfg),
                                      posenc.mrope(X, P4, sections=[2, 2, 2, 2],
                                                   ordering="xdrope"))


def test_xdrope_is_rope_on_text_and_no_rotation_on_images() -> None:
    """Equal rows: rope. Different rows: the two features of a pair turn by different angles,
    so a pair's norm changes (transformers' HunYuanVL; vLLM's contiguous form keeps it)."""
    m = np.arange(5) * 1000
    np.testing.assert_allclose(posenc.mrope(X, np.stack([m] * 4), sections=[2, 2, 2, 2],
                                            ordering="xdrope"), posenc.rope(X, m),
                               rtol=0, atol=1e-12)
    pos = np.stack([m, m + 7, m + 3, m * 0])
    norm = np.linalg.norm  # pairs (j, j + 8) of the half layout
    before = norm(np.stack([X[..., :8], X[..., 8:]]), axis=0)
    for ordering, keeps in (("xdrope", False), ("contiguous", True)):
        out = posenc.mrope(X, pos, sections=[2, 2, 2, 2], ordering=ordering)
        after = norm(np.stack([out[..., :8], out[..., 8:]]), axis=0)
        assert np.allclose(after, before, rtol=0, atol=1e-12) == keeps, ordering


@pytest.mark.parametrize(
    ("x", "positions", "kwargs", "message"),
    [
        (X, P3, {"sections": [3, 2, 3], "ordering": "ernie"},
         r"sections=\[3, 2, 3\]: ordering='ernie' .* \[h, w, t\] must be equal \(3 != 2\)"),
        (X, P3, {"sections": [2, 4, 2], "ordering": "bailing"},
         r"sections=\[2, 4, 2\]: ordering='bailing' .* \[t, h, w\] must be equal \(4 != 2\)"),
        (X, P3, {"sections": [2, 2, 2, 2], "ordering": "ernie"},
         r"sections=\[2, 2, 2, 2\]: ordering='ernie' takes 3 sections \[h, w, t\]"),
        (X, P3, {"sections": [2, 2, 2, 2], "interleaved": True},
         r"sections=\[2, 2, 2, 2\]: ordering='interleaved' takes 3 sections"),
        (X, P3, {"sections": [2, 2, 2, 2], "ordering": "xdrope"},
         r"sections=\[2, 2, 2, 2\] with ordering='xdrope' reads 4 rows .* shape \(3, 5\)"),
        (X, P4, {"sections": [2, 3, 3], "ordering": "bailing"},
         r"sections=\[2, 3, 3\] with ordering='bailing' reads 3 rows .* \[3, seq\] = \[3, 5\]"),
        (X, P4, {"sections": [2, 2, 2, 3], "ordering": "xdrope"},
         r"sections=\[2, 2, 2, 3\] sum to 9, .* must sum to 8"),
        (X, P3, {"sections": [2, 3, 3], "ordering": "magic"}, r"ordering='magic' is not one of"),
        (X, P3, {"sections": [4, 2, 2], "ordering": "ernie", "interleaved": True},
         r"conflicting M-RoPE orderings \(ordering -> 'ernie', interleaved -> 'interleaved'\)"),
        (X, P4, {"ordering": "contiguous", "scaling": {"xdrope_section": [2, 2, 2, 2]}},
         r"conflicting .*\(ordering -> 'contiguous', scaling -> 'xdrope'\)"),
        (X, P4, {"scaling": {"mrope_section": [2, 2, 2, 2], "xdrope_section": [4, 2, 1, 1]}},
         r"scaling\['mrope_section'\]=\[2, 2, 2, 2\] conflicts with scaling\['xdrope_section'\]"),
        (X, P3, {"scaling": {"mrope_section": [2, 3, 3], "model_type": 7}},
         r"scaling\['model_type'\] must be a string, got 7"),
    ],
)
def test_bad_orderings(pe, x, positions, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.mrope(x, positions, **kwargs)


# --------------------------------------------------------------------------------------------
# broken implementations the properties catch
# --------------------------------------------------------------------------------------------


def _failing(**overrides) -> set[str]:
    from ..failing import failing_properties

    return failing_properties(["mrope"], name="broken_mrope", **overrides)


def _impl():
    from posenc.encodings import public_functions

    return public_functions()["mrope"]


def _ernie_as_qwen2_vl(x, positions, *, ordering=None, **kw):
    """ERNIE's [h, w, t] sections fed to Qwen2-VL's contiguous runs (the usual port)."""
    return _impl()(x, positions, ordering=None if ordering == "ernie" else ordering, **kw)


def _xdrope_as_vllm(x, positions, *, ordering=None, **kw):
    return _impl()(x, positions, ordering="contiguous" if ordering == "xdrope" else ordering,
                   **kw)


def _bailing_sections_as_ernie(x, positions, *, ordering=None, sections=None, **kw):
    """Bailing's [t, h, w] read in ERNIE's [h, w, t] order (h/w alternate over 2 s_t)."""
    if ordering == "bailing":
        t, h, w = sections
        return _impl()(x, positions, ordering="ernie", sections=[t, t, h + w - t], **kw)
    return _impl()(x, positions, ordering=ordering, sections=sections, **kw)


def test_ordering_bugs_fail_only_their_ordering_checks() -> None:
    assert _failing(mrope=_ernie_as_qwen2_vl) == {
        "mrope_section_isolation[layout=interleaved,ordering=ernie]"}
    assert _failing(mrope=_xdrope_as_vllm) == {
        "mrope_section_isolation[ordering=xdrope]",
        "mrope_section_isolation[layout=interleaved,ordering=xdrope]"}
    assert _failing(mrope=_bailing_sections_as_ernie) == {
        "mrope_section_isolation[ordering=bailing]"}
