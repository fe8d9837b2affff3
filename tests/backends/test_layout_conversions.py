"""Pairings of the vision and multimodal ropes and the sinusoidal table's column layouts are
conventions the harness converts, not scopes (issue 45, parts 3 and 4).

Each implementation below is written here the way its library writes it, in plain NumPy
float64 with exact angles: mistral-inference's Pixtral (complex pairs (2j, 2j+1)), a
rotate_half port of Llama 4's vision rope, an M-RoPE on interleaved pairs, and Marian's and
tensor2tensor's sinusoidal tables. Declared, each keeps every check it can express with 0 FAIL
and 0 ERROR; undeclared, its failures are named "layout swapped"; broken, its bugs still fail
with their names through the conversion."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from posenc.backends.sinusoidal_layouts import LAYOUTS, plan
from posenc.catalog import reference_function, specs
from posenc.conformance import check

F64 = {"framework": "numpy", "dtypes": ["float64"], "max_examples": 3, "gradients": False}


def _complex_pairs(x: Any, angles: np.ndarray) -> np.ndarray:
    """x's features (2j, 2j+1) as one complex number each, turned by ``angles`` [seq, d/2]."""
    x = np.asarray(x)
    z = x.astype(np.float64).reshape(*x.shape[:-1], x.shape[-1] // 2, 2)
    turned = (z[..., 0] + 1j * z[..., 1]) * np.exp(1j * angles)
    return np.stack([turned.real, turned.imag], axis=-1).reshape(x.shape).astype(x.dtype)


def _grid(positions: Any, max_width: int | None) -> np.ndarray:
    pos = np.asarray(positions)
    return np.stack([pos // max_width, pos % max_width], axis=1) if pos.ndim == 1 else pos


def mistral_pixtral(x: Any, positions: Any, *, base: float = 10000.0,
                    max_width: int | None = None) -> np.ndarray:
    """Pixtral as mistral-inference computes it: one ladder base^(-2k/d), the even rungs
    scaled by the row, the odd ones by the column, the row's first, on complex pairs."""
    dim = np.shape(x)[-1]
    ladder = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    grid = _grid(positions, max_width).astype(np.float64)
    angles = np.concatenate([grid[:, :1] * ladder[0::2], grid[:, 1:] * ladder[1::2]], axis=-1)
    return _complex_pairs(x, angles)


def mistral_pixtral_one_off(x: Any, positions: Any, *, base: float = 10000.0,
                            max_width: int | None = None) -> np.ndarray:
    """The same with coordinates counted from 1."""
    return mistral_pixtral(x, _grid(positions, max_width) + 1, base=base)


def _half_pairs(x: Any, angles: np.ndarray) -> np.ndarray:
    """x's features (j, j + d/2) turned by ``angles`` [seq, d/2] (rotate_half)."""
    x = np.asarray(x)
    half = x.shape[-1] // 2
    a, b = x[..., :half].astype(np.float64), x[..., half:].astype(np.float64)
    cos, sin = np.cos(angles), np.sin(angles)
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1).astype(x.dtype)


def pixtral_on_half_pairs(x: Any, positions: Any, *, base: float = 10000.0,
                          max_width: int | None = None) -> np.ndarray:
    """transformers' pairing under a function that claims mistral-inference's."""
    dim = np.shape(x)[-1]
    ladder = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    grid = _grid(positions, max_width).astype(np.float64)
    angles = np.concatenate([grid[:, :1] * ladder[0::2], grid[:, 1:] * ladder[1::2]], axis=-1)
    return _half_pairs(x, angles)


def llama4_vision_rotate_half(x: Any, positions: Any, *, base: float = 10000.0) -> np.ndarray:
    """Llama 4's vision rope ported onto rotate_half: (column + 1), then (row + 1), each over
    base^(-4j/d); the CLS token (negative coordinates) unrotated."""
    dim = np.shape(x)[-1]
    pos = np.asarray(positions)
    theta = base ** (-4.0 * np.arange(dim // 4) / dim)
    one_based = np.where((pos < 0).any(axis=1, keepdims=True), 0, pos + 1).astype(np.float64)
    angles = np.concatenate([one_based[:, 1:] * theta, one_based[:, :1] * theta], axis=-1)
    return _half_pairs(x, angles)


def _mrope_rows(n: int, sections: list[int], ordering: str) -> np.ndarray:
    """The position row (t, h, w) that drives each of the n frequencies: Qwen2-VL's runs,
    Qwen3-VL's every third, ERNIE's and Bailing's alternating h, w before a t tail."""
    j = np.arange(n)
    if ordering == "contiguous":
        return np.repeat(np.arange(len(sections)), sections)
    if ordering in ("ernie", "bailing"):
        s_h = sections[0] if ordering == "ernie" else sections[1]  # [h, w, t] / [t, h, w]
        return np.where(j < 2 * s_h, 1 + j % 2, 0)
    rows = np.zeros(n, dtype=int)
    rows[(j % 3 == 1) & (j < 3 * sections[1])] = 1
    rows[(j % 3 == 2) & (j < 3 * sections[2])] = 2
    return rows


def mrope_interleaved_pairs(x: Any, positions: Any, *, sections: list[int],
                            ordering: str | None = None, interleaved: bool = False,
                            base: float = 10000.0) -> np.ndarray:
    """M-RoPE on complex pairs (2j, 2j+1) (ERNIE 4.5-VL's pairing) with the Qwen2-VL, Qwen3-VL,
    ERNIE or Bailing assignment of frequencies to the (t, h, w) rows of positions [3, seq]."""
    dim = np.shape(x)[-1]
    ordering = ordering or ("interleaved" if interleaved else "contiguous")
    if ordering == "xdrope":  # its pairs' two features can follow different rows
        raise NotImplementedError("ordering 'xdrope'")
    inv_freq = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    rows = _mrope_rows(dim // 2, list(sections), ordering)
    angles = np.moveaxis(np.asarray(positions).astype(np.float64)[rows], 0, -1) * inv_freq
    if angles.ndim == 3:  # [batch, seq, d/2] against x [batch, ..., seq, dim]
        angles = angles.reshape(angles.shape[0], *[1] * (np.ndim(x) - 3), *angles.shape[1:])
    return _complex_pairs(x, angles)


def marian_table(positions: Any, dim: int, *, base: float = 10000.0,
                 padding_idx: int | None = None, dtype: str = "float32") -> np.ndarray:
    """Marian/BART's table: ceil(d/2) sines, then floor(d/2) cosines of base^(-2i/d)."""
    pos = np.asarray(positions)
    omega = base ** (-2.0 * np.arange((dim + 1) // 2) / dim)
    angles = pos.astype(np.float64)[..., None] * omega
    out = np.concatenate([np.sin(angles), np.cos(angles)[..., :dim // 2]], axis=-1)
    if padding_idx is not None:
        out = np.where((pos == padding_idx)[..., None], 0.0, out)
    return out.astype(dtype)


def marian_table_one_ahead(positions: Any, dim: int, *, base: float = 10000.0,
                           padding_idx: int | None = None, dtype: str = "float32"
                           ) -> np.ndarray:
    """Every position one ahead (fairseq's padding_idx + 1 applied twice)."""
    return marian_table(np.asarray(positions) + 1, dim, base=base, padding_idx=padding_idx,
                        dtype=dtype)


def paper_table(positions: Any, dim: int, *, base: float = 10000.0,
                padding_idx: int | None = None, dtype: str = "float32") -> np.ndarray:
    """The paper's alternating columns under a function that claims Marian's."""
    concat = marian_table(positions, dim, base=base, padding_idx=padding_idx, dtype=dtype)
    n = (dim + 1) // 2
    order = [c // 2 if c % 2 == 0 else n + c // 2 for c in range(dim)]
    return concat[..., order]


def t2t_table(positions: Any, dim: int, *, base: float = 10000.0,
              padding_idx: int | None = None, dtype: str = "float32") -> np.ndarray:
    """tensor2tensor's get_timing_signal_1d: floor(d/2) frequencies
    exp(-i·ln(base)/max(floor(d/2) - 1, 1)), [sin | cos], a zero column for odd d."""
    pos = np.asarray(positions)
    half = dim // 2
    omega = np.exp(-np.arange(half) * math.log(base) / max(half - 1, 1))
    angles = pos.astype(np.float64)[..., None] * omega
    out = np.concatenate([np.sin(angles), np.cos(angles),
                          np.zeros((*pos.shape, dim % 2))], axis=-1)
    if padding_idx is not None:
        out = np.where((pos == padding_idx)[..., None], 0.0, out)
    return out.astype(dtype)


# -- the float64 identities the conversions rest on ------------------------------------------
def test_mistral_inference_pixtral_is_the_interleaved_pixtral_in_float64() -> None:
    ref = reference_function(specs()["pixtral_rope"])
    rng = np.random.default_rng(45)
    x = rng.normal(size=(2, 7, 32))
    grid = rng.integers(0, 300, size=(7, 2))
    ours = mistral_pixtral(x, grid, base=100.0)
    np.testing.assert_allclose(ours, ref(x, grid, base=100.0, max_width=None,
                                         layout="interleaved"), rtol=0, atol=1e-12)
    assert np.abs(ours - ref(x, grid, base=100.0, max_width=None, layout="half")).max() > 0.1


@pytest.mark.parametrize("asked", LAYOUTS)
@pytest.mark.parametrize("own", LAYOUTS)
def test_every_sinusoidal_layout_is_a_gather_of_every_other(asked: str, own: str) -> None:
    """The plan's width, base and columns turn the float64 reference's table in ``own`` into
    its table in ``asked``, for every width 1..13 and bases 10, 1e4."""
    ref = reference_function(specs()["sinusoidal"])
    positions = np.array([0, 1, 5, 77, 4096])
    for dim in range(1, 14):
        for base in (10.0, 1e4):
            how = plan(asked, own, dim, base)
            got = ref(positions, how.dim, base=how.base, layout=own, padding_idx=None)
            columns = [got[:, g] if g is not None else np.zeros(len(positions))
                       for g in how.gather]
            want = ref(positions, dim, base=base, layout=asked, padding_idx=None)
            np.testing.assert_allclose(np.stack(columns, axis=-1), want, rtol=0, atol=1e-12,
                                       err_msg=f"{asked} from {own}, dim {dim}, base {base}")
            if {asked, own} <= {"interleaved", "concat"}:
                assert (how.dim, how.base) == (dim, base)  # a pure column permutation


# -- declared: every check ------------------------------------------------------------------
def _clean(report: Any) -> None:
    assert not [r for r in report.results if r.status in ("fail", "error")], report.text()
    assert report.passed, report.text()


def _diagnoses(report: Any) -> set[str]:
    return {(r.details.get("diagnosis") or {}).get("name") for r in report.failed}


@pytest.mark.parametrize(("fn", "encoding", "layout", "converted"), [
    (mistral_pixtral, "pixtral_rope", "interleaved", "layout=half converted"),
    (llama4_vision_rotate_half, "llama4_vision_rope", "half", "layout=interleaved converted"),
    (mrope_interleaved_pairs, "mrope", "interleaved", "layout=half converted"),
    (marian_table, "sinusoidal", "concat", "layout=interleaved converted"),
    (t2t_table, "sinusoidal", "t2t", "layout=concat converted"),
])
def test_a_declared_convention_keeps_every_check(fn: Any, encoding: str, layout: str,
                                                 converted: str) -> None:
    report = check(fn, encoding, layout=layout, **F64)
    _clean(report)
    out_of_scope = [r for r in report.results if r.status == "unsupported"]
    if encoding == "mrope":  # what the function cannot express, each with its reason
        assert all("xdrope" in r.message or "scaling" in r.message
                   for r in out_of_scope), report.text()
        assert report.in_scope >= 10
    else:
        assert not out_of_scope, report.text()
    assert any(r.details.get("pairing") for r in report.results if r.check.kind == "property")
    text = report.text()
    assert "converted (" in text and converted in text, text


def test_the_float32_tables_keep_every_check_too() -> None:
    report = check(marian_table, "sinusoidal", layout="concat", framework="numpy",
                   dtypes=["float32"], max_examples=3, gradients=False)
    _clean(report)
    assert report.in_scope == len(report.results) >= 19


# -- undeclared: named ----------------------------------------------------------------------
@pytest.mark.parametrize(("fn", "encoding", "named"), [
    (mistral_pixtral, "pixtral_rope", {"interleaved_for_half"}),
    (llama4_vision_rotate_half, "llama4_vision_rope", {"half_for_interleaved"}),
    (mrope_interleaved_pairs, "mrope", {"interleaved_for_half"}),
    (marian_table, "sinusoidal", {"concat_layout"}),
])
def test_an_undeclared_convention_is_named_layout_swapped(fn: Any, encoding: str,
                                                          named: set[str]) -> None:
    report = check(fn, encoding, **F64)
    assert report.failed, report.text()
    assert any(r.check.kind == "property" for r in report.failed)  # named from their last call
    assert _diagnoses(report) == named, report.text()
    assert all(r.details["diagnosis"]["title"] == "layout swapped" for r in report.failed)
    assert "layout swapped" in report.text()


# -- bugs through the conversion ------------------------------------------------------------
# the flat-id cases: one row and one column more is not flat id + 1, which the diagnosis plants
_FLAT_IDS = {"flat_ids_max_width_64", "mistral_inference_interleaved"}


@pytest.mark.parametrize(("fn", "encoding", "layout", "named", "unnamed_allowed"), [
    (mistral_pixtral_one_off, "pixtral_rope", "interleaved", {"positions_plus_one"}, _FLAT_IDS),
    (pixtral_on_half_pairs, "pixtral_rope", "interleaved", {"half_for_interleaved"}, set()),
    (marian_table_one_ahead, "sinusoidal", "concat", {"positions_plus_one"}, set()),
    (paper_table, "sinusoidal", "concat", {"interleaved_layout"}, set()),
])
def test_bugs_still_fail_with_their_names(fn: Any, encoding: str, layout: str,
                                          named: set[str], unnamed_allowed: set[str]) -> None:
    report = check(fn, encoding, layout=layout, properties=False, **F64)
    cases = [r for r in report.results if r.check.kind == "case"]
    failed = {r.check.name for r in report.failed}
    # every case where the bug shows fails (position 0 alone, or a zero row, hides it)
    assert len(failed) >= len(cases) - 1, report.text()
    assert any(r.details.get("pairing") for r in report.failed)  # converted ones too
    assert _diagnoses(report) - {None} == named, report.text()
    unnamed = [r.check.name for r in report.failed if not r.details.get("diagnosis")]
    assert set(unnamed) <= unnamed_allowed, (unnamed, report.text())


def test_a_swapped_pairing_is_named_in_the_pairing_it_claimed() -> None:
    report = check(pixtral_on_half_pairs, "pixtral_rope", layout="interleaved",
                   properties=False, skip=["*/case:mistral_inference_interleaved",
                                           "*/case:interleaved_grid"], **F64)
    assert report.failed and all(r.details["diagnosis"]["pairing"] == "interleaved"
                                 for r in report.failed), report.text()
    assert "as the implementation ran it: features permuted into its interleaved pairing" in \
        report.failed[0].message


def test_a_swapped_table_is_named_in_the_columns_it_claimed() -> None:
    report = check(paper_table, "sinusoidal", layout="concat", properties=False,
                   skip=[f"*/case:{c.name}" for c in specs()["sinusoidal"].cases
                         if c.params.get("layout") != "t2t"], **F64)
    assert report.failed and all(r.details.get("pairing") for r in report.failed)
    assert {r.details["diagnosis"]["name"] for r in report.failed} == {"interleaved_layout"}
    assert all("its own concat columns at the width and base it was called with" in r.message
               for r in report.failed), report.text()
