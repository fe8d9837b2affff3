"""Pairing is a convention the harness converts, not a scope (issue 29, class 6).

A porter's rope fixed at the interleaved pairing (GPT-J, Meta's Llama, torchtune) is written
here in plain NumPy float64 with exact angles; declared ``layout="interleaved"``, every rope
check runs on it, the half-layout ones through the feature permutation, and bugs still fail
with their names."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from posenc import ParameterError, Unsupported
from posenc.backends import adapters, get_backend
from posenc.catalog import reference_function, specs
from posenc.conformance import check

F64 = {"dtypes": ["float64"], "max_examples": 3, "gradients": False}
_frequencies = reference_function(specs()["rope_frequencies"])  # (inv_freq, attention factor)


def _rope(x: Any, positions: Any, pairs: str, *, base: float, rotary_dim: int | None,
          scaling: dict[str, Any] | None, seq_len: int | None) -> np.ndarray:
    """Rotary embedding in float64: ``pairs`` is how features pair up, (2i, 2i+1) or
    (i, i + r/2); the frequency schedule is read off the float64 reference's table."""
    x = np.asarray(x)
    seq, dim = x.shape[-2], x.shape[-1]
    pos = np.arange(seq) if positions is None else np.asarray(positions)
    scaling = dict(scaling) if scaling else None
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type"))
    if seq_len is None and kind in ("dynamic", "longrope"):
        seq_len = seq if positions is None else int(pos.max()) + 1
    if rotary_dim is not None and scaling:
        scaling.pop("partial_rotary_factor", None)
    inv_freq, factor = _frequencies(dim=rotary_dim or dim, base=base, scaling=scaling or None,
                                    seq_len=seq_len)
    r = 2 * len(inv_freq)
    angles = pos.astype(np.float64)[..., None] * np.asarray(inv_freq, dtype=np.float64)
    if pos.ndim == 2:  # [batch, seq] lines up with x[b, ..., s, :]
        angles = angles.reshape(pos.shape[0], *([1] * (x.ndim - 3)), seq, r // 2)
    cos, sin = np.cos(angles) * factor, np.sin(angles) * factor
    x64 = x.astype(np.float64)
    first, second = (slice(0, r, 2), slice(1, r, 2)) if pairs == "interleaved" else (
        slice(0, r // 2), slice(r // 2, r))
    a, b = x64[..., first], x64[..., second]
    out = x64.copy()
    out[..., first] = a * cos - b * sin
    out[..., second] = b * cos + a * sin
    return out.astype(x.dtype)


def interleaved_rope(x: Any, positions: Any = None, *, base: float = 10000.0,
                     rotary_dim: int | None = None, scaling: dict[str, Any] | None = None,
                     seq_len: int | None = None) -> np.ndarray:
    """Meta/GPT-J style: pairs (2i, 2i+1) only, no layout argument."""
    return _rope(x, positions, "interleaved", base=base, rotary_dim=rotary_dim,
                 scaling=scaling, seq_len=seq_len)


# -- the same, wrong three ways ----------------------------------------------------------------
def actually_half(x: Any, positions: Any = None, *, base: float = 10000.0,
                  rotary_dim: int | None = None, scaling: dict[str, Any] | None = None,
                  seq_len: int | None = None) -> np.ndarray:
    return _rope(x, positions, "half", base=base, rotary_dim=rotary_dim, scaling=scaling,
                 seq_len=seq_len)


def one_position_ahead(x: Any, positions: Any = None, *, base: float = 10000.0,
                       rotary_dim: int | None = None, scaling: dict[str, Any] | None = None,
                       seq_len: int | None = None) -> np.ndarray:
    pos = np.arange(np.shape(x)[-2]) if positions is None else np.asarray(positions)
    return _rope(x, pos + 1, "interleaved", base=base, rotary_dim=rotary_dim, scaling=scaling,
                 seq_len=seq_len)


def base_ignored(x: Any, positions: Any = None, *, base: float = 10000.0,
                 rotary_dim: int | None = None, scaling: dict[str, Any] | None = None,
                 seq_len: int | None = None) -> np.ndarray:
    return _rope(x, positions, "interleaved", base=10000.0, rotary_dim=rotary_dim,
                 scaling=scaling, seq_len=seq_len)


def _only(*cases: str) -> list[str]:
    """``skip`` patterns leaving only these rope cases."""
    return [f"*/case:{c.name}" for c in specs()["rope"].cases if c.name not in cases]


def test_an_interleaved_only_rope_gets_every_rope_check() -> None:
    report = check(interleaved_rope, "rope", framework="numpy", layout="interleaved", **F64)
    assert report.passed, report.text()
    assert not [r for r in report.results if r.status in ("fail", "error")]
    assert report.in_scope >= 0.9 * len(report.results), report.text()
    assert report.grade == "exact"
    by_name = {r.check.name: r for r in report.results if r.check.kind == "case"}
    assert "pairing" not in by_name["interleaved_partial_rotary"].details  # its own pairing
    assert "layout=half converted to the implementation's interleaved pairing" in \
        by_name["near_2_20_llama3"].details["pairing"]
    assert "converted (" in report.text()


@pytest.mark.parametrize(("mutant", "cases", "named"), [
    (actually_half, ("half_partial_rotary", "interleaved_default_positions"),
     {"half_for_interleaved"}),
    (one_position_ahead, ("half_partial_rotary", "interleaved_default_positions"),
     {"positions_plus_one"}),
    (base_ignored, ("llama_head_dim_128", "yarn_attention_factor"), {"theta_10000"}),
])
def test_bugs_fail_through_the_conversion_with_their_names(mutant: Any, cases: tuple[str, ...],
                                                          named: set[str]) -> None:
    report = check(adapters.rope_function(mutant, framework="numpy", layout="interleaved"),
                   "rope", properties=False, skip=_only(*cases), **F64)
    assert {r.check.name for r in report.failed} == set(cases), report.text()
    assert {r.details["diagnosis"]["name"] for r in report.failed} == named, report.text()
    converted = [r for r in report.failed if r.details.get("pairing")]
    assert converted and all(r.status == "fail" for r in converted)


def test_a_layout_swap_through_the_permutation_is_named_in_its_own_pairing() -> None:
    report = check(adapters.rope_function(actually_half, framework="numpy", layout="interleaved"),
                   "rope", properties=False, skip=_only("half_default_positions"), **F64)
    (failure,) = report.failed
    assert failure.details["diagnosis"]["pairing"] == "interleaved"
    assert "as the implementation ran it" in failure.message
    assert "likely: layout swapped" in failure.message


def test_a_pairing_declared_and_scoped_out_is_a_parameter_error() -> None:
    with pytest.raises(ParameterError, match=r"layout='interleaved'.*layout='half'"):
        adapters.rope_function(interleaved_rope, unsupported={"layout": "half"},
                               layout="interleaved")
    with pytest.raises(ParameterError, match=r"layout='half'.*layout='interleaved'"):
        adapters.cos_sin_cache(lambda length, dim: None, unsupported={"layout": "interleaved"},
                               layout="half")
    fixed = adapters.function("mla_rope", lambda q, k_rot, positions=None: (q, k_rot, 1.0))
    assert not hasattr(fixed.call, "posenc_pairing")  # deinterleave: called as it is
    with pytest.raises(ParameterError, match="no pairing to convert"):
        adapters.function("alibi_slopes", lambda num_heads: [1.0], layout="interleaved")
    with pytest.raises(ParameterError, match="conventions"):
        check(adapters.rope_function(interleaved_rope), "rope", layout="interleaved")


def test_x_as_batch_seq_heads_dim() -> None:
    def bshd_rope(x: Any, positions: Any = None, *, base: float = 10000.0,
                  rotary_dim: int | None = None) -> np.ndarray:
        assert x.ndim == 4
        turned = np.swapaxes(x, 1, 2)
        return np.swapaxes(interleaved_rope(turned, positions, base=base, rotary_dim=rotary_dim),
                           1, 2)

    report = check(bshd_rope, "rope", framework="numpy", layout="interleaved", axes="bshd",
                   properties=False, skip=_only("batched_left_padding", "two_dims",
                                                "half_partial_rotary"), **F64)
    assert report.passed and report.in_scope == 3, report.text()


@pytest.mark.parametrize(("encoding", "key", "own"), [
    ("xpos", "layout", "half"), ("axial_rope", "layout", "interleaved"),
    ("mrope", "layout", "interleaved"), ("mla_rope", "layout", "interleaved"),
    ("dual_chunk_attention", "layout", "interleaved"), ("ggml_rope", "mode", "neox")])
def test_every_encoding_with_a_pairing_runs_in_the_other_one(encoding: str, key: str,
                                                             own: str) -> None:
    """posenc's own NumPy implementation pinned at one pairing (the other than the spec's
    default) passes every golden case of the encoding through the permutation."""
    spec = specs()[encoding]
    numpy_fn = get_backend("numpy").function(spec.function)
    pairing = {"neox": "half", "normal": "interleaved"}.get(own, own)

    def pinned(**values: Any) -> Any:
        if values.get(key) in ("mrope", "imrope", "vision"):  # ggml modes that are no pairing
            raise Unsupported(f"mode={values[key]!r}")
        assert values.get(key, own) == own  # never another pairing
        return numpy_fn(**{**values, key: own})

    adapter = adapters.Adapter(spec.function, pinned, f"{encoding} pinned {own}",
                               framework="numpy")
    from posenc.backends.pairing import declare_pairing

    report = check(declare_pairing(adapter, pairing), encoding, properties=False, **F64)
    assert report.passed and not report.failed, report.text()
    converted = [r for r in report.results if r.details.get("pairing")]
    assert len(converted) >= 2, report.text()


def test_cli_declares_the_pairing_of_a_function(tmp_path: Any, capsys: Any) -> None:
    from posenc.cli import main

    (tmp_path / "meta_rope.py").write_text(
        "from tests.backends.test_pairing import interleaved_rope as rope\n")
    code = main(["check", "rope", f"{tmp_path}/meta_rope.py:rope", "--layout", "interleaved",
                 "--framework", "numpy", "--dtype", "float64", "--only", "cases"])
    out = capsys.readouterr().out
    assert code == 0, out
    found = re.search(r"(\d+) of (\d+) checks in scope", out)
    assert found and found[1] == found[2], out
    assert "converted (" in out and "unsupported" not in out
    code = main(["check", "rope", f"{tmp_path}/meta_rope.py:rope", "--layout", "interleaved",
                 "--unsupported", "layout=half"])
    err = capsys.readouterr().err
    assert code == 2 and "layout='interleaved' declares its pairing" in err
    assert "layout='half' out of its scope" in err
