"""Precision profiles: float32 angles computed the usual way pass ``conventional`` and fail
``exact`` on precision alone, bf16 angles grade ``reduced``, and real bugs (a layout swap, an
off-by-one position, a wrong base) fail ``conventional``."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import posenc
from posenc.backends import get_backend
from posenc.conformance import Options, run
from posenc.conformance.reports import report

from ..mutants import overrides

torch = pytest.importorskip("torch")


def _rope_results(backend: Any, precision: str, **kw: Any) -> list[Any]:
    options = Options(backends=[backend], encodings=["rope"], dtypes=["float32"],
                      modes=["eager"], gradients=False, max_examples=6, precision=precision,
                      **kw)
    return run(options)


@pytest.mark.parametrize("mutant", [overrides.SWAPPED_LAYOUT, overrides.OFF_BY_ONE,
                                    overrides.WRONG_BASE], ids=lambda m: m.name)
def test_porting_bugs_still_fail_conventional(mutant: Any) -> None:
    # the named_* cases sit at their models' longest positions, where the reduced profile's
    # allowance (bf16 angles) admits any angle: they would only dilute the count below
    results = _rope_results(mutant, "conventional", properties=False,
                            skip=["*/rope/case:named_*"])
    failed = [r for r in results if r.failed]
    assert len(failed) >= len(results) // 2, [r.check.name for r in failed]
    # nothing a bug breaks is graded exact or conventional; most fail every profile
    assert all(r.grade in (None, "reduced") for r in failed)
    assert sum(r.grade is None for r in failed) >= len(failed) // 2


def _transformers_llama_rope(x: Any, positions: Any = None, *, base: float = 10000.0,
                             layout: str = "half", rotary_dim: int | None = None,
                             scaling: Any = None, seq_len: int | None = None) -> Any:
    """transformers' LlamaRotaryEmbedding (float32 angles m·θ) and rotate_half, as a porter
    would wrap them: half layout, full rotary width, no scaling."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, rotate_half

    if layout != "half":
        raise posenc.Unsupported(f"layout={layout!r}: transformers pairs (i, i + d/2) only")
    if rotary_dim not in (None, x.shape[-1]) or scaling is not None:
        raise NotImplementedError("partial rotary and scaling dicts are not wrapped")
    seq, dim = x.shape[-2:]
    pos = torch.arange(seq) if positions is None else positions
    pos = pos.reshape(-1, seq)  # [batch or 1, seq]
    config = LlamaConfig(hidden_size=dim, num_attention_heads=1, head_dim=dim,
                         rope_parameters={"rope_type": "default", "rope_theta": float(base)})
    cos, sin = LlamaRotaryEmbedding(config)(x, pos)  # [batch or 1, seq, dim]
    if pos.shape[0] == 1:
        cos, sin = cos[0], sin[0]
    else:  # positions [batch, seq] apply to x[b, ..., s, :]
        shape = (pos.shape[0],) + (1,) * (x.ndim - 3) + (seq, dim)
        cos, sin = cos.reshape(shape), sin.reshape(shape)
    return x * cos + rotate_half(x) * sin


HF_LLAMA = dataclasses.replace(get_backend("torch"), name="hf-llama",
                               overrides={"rope": _transformers_llama_rope})


@pytest.fixture(scope="module")
def hf_exact() -> list[Any]:
    pytest.importorskip("transformers")
    return _rope_results(HF_LLAMA, "exact")


def test_float32_angles_fail_exact_only_on_precision(hf_exact: list[Any]) -> None:
    assert not [r for r in hf_exact if r.status == "error"], report.failures(hf_exact)
    failed = [r for r in hf_exact if r.failed]
    assert failed, "float32 angles must not meet the exact profile everywhere"
    # each meets the conventional profile, or that profile cannot judge it (its allowance for
    # float32 angle and frequency arithmetic reaches a tenth of the data): never a bug
    assert all(r.grade == "conventional" or r.details.get("not_judgeable_under") == "conventional"
               for r in failed), report.failures(failed)
    assert any(r.grade == "conventional" for r in failed)
    phase = next(r for r in failed if r.check.name == "rope_phase_precision")
    assert "not a precision issue" not in phase.message
    assert "float32 angles m*theta of float32 frequencies" in phase.message
    passed = [r for r in hf_exact if r.status == "pass"]
    assert passed and all(r.grade == "exact" for r in passed)
    unsupported = {r.check.name: r.message for r in hf_exact if r.status == "unsupported"}
    assert "interleaved_default_positions" in unsupported
    assert "layout='interleaved'" in unsupported["interleaved_default_positions"]
    assert "_transformers_llama_rope" in unsupported["interleaved_default_positions"]
    assert "scaling dicts" in unsupported["near_2_20_llama3"]


def test_float32_angles_pass_conventional_with_that_grade(hf_exact: list[Any]) -> None:
    results = _rope_results(HF_LLAMA, "conventional")
    assert not [r for r in results if r.failed], report.failures(results)
    graded = {r.check.name: r.grade for r in results if r.status == "pass"}
    assert graded == {r.check.name: r.grade for r in hf_exact if r.grade is not None}
    assert "conventional" in graded.values()
    blind = {r.check.name for r in results if r.status == "unjudgeable"}
    assert blind == {r.check.name for r in hf_exact
                     if r.details.get("not_judgeable_under") == "conventional"}
    assert "rope_phase_precision" in blind and all(r.grade is None for r in results
                                                   if r.status == "unjudgeable")
    text = report.failures(results)
    assert "(grade: conventional, not exact)" in text
    assert "NOT JUDGEABLE hf-llama/cpu/float32/eager/rope/property:rope_phase_precision" in text
    n, ran = sum(g == "conventional" for g in graded.values()), len(graded) + len(blind)
    assert (f"ok {len(graded)} ({len(blind)} not judgeable, {n} graded conventional, in scope "
            f"{ran}/{len(results)})") in report.matrix(results)
    line = report.closing_line(results)
    assert "0 failed" in line and f"{len(blind)} not judgeable" in line
    assert f"in scope: {ran} of {len(results)}" in line


def _bf16_angle_rope(x: Any, positions: Any = None, *, base: float = 10000.0, **kw: Any) -> Any:
    """Half-layout rope whose angles m·θ are held in bfloat16 (a cos/sin cache in bf16)."""
    seq, dim = x.shape[-2:]
    pos = torch.arange(seq) if positions is None else positions
    inv_freq = 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = (pos[..., None].double() * inv_freq).to(torch.bfloat16).double()
    angles = torch.cat([angles, angles], dim=-1)
    if angles.ndim == 3:
        angles = angles.reshape((angles.shape[0],) + (1,) * (x.ndim - 3) + (seq, dim))
    rotated = torch.cat([-x[..., dim // 2:], x[..., : dim // 2]], dim=-1)
    return (x * angles.cos() + rotated * angles.sin()).to(x.dtype)


def _outside_plain_rope(function: str, params: dict[str, Any]) -> str | None:
    if params.get("layout", "half") != "half":
        return "half layout only"
    if params.get("rotary_dim") is not None or params.get("scaling") is not None:
        return "no partial rotary, no scaling"
    return None


BF16_ANGLES = dataclasses.replace(get_backend("torch"), name="bf16-angles",
                                  overrides={"rope": _bf16_angle_rope},
                                  scope=_outside_plain_rope)


def test_bf16_angles_grade_reduced() -> None:
    results = _rope_results(BF16_ANGLES, "exact", properties=False)
    by_name = {r.check.name: r for r in results}
    padded = by_name["batched_left_padding"]  # angles up to 4: bfloat16 is 2^-9 off
    assert (padded.status, padded.grade) == ("fail", "reduced"), padded.message
    # at position 104, bfloat16 angles are 0.4 rad off: the reduced profile cannot judge there
    llama = by_name["llama_head_dim_128"]
    assert (llama.status, llama.grade) == ("fail", None), llama.message
    assert llama.details["not_judgeable_under"] == "reduced"
    assert by_name["interleaved_default_positions"].status == "unsupported"
    assert "half layout only" in by_name["interleaved_default_positions"].message
    reduced = _rope_results(BF16_ANGLES, "reduced", properties=False)
    assert not [r for r in reduced if r.failed], report.failures(reduced)
    assert {r.check.name: r.grade for r in reduced if r.grade} == {
        r.check.name: r.grade for r in results if r.grade}
    assert "reduced" in {r.grade for r in reduced}
    assert reduced[[r.check.name for r in reduced].index("llama_head_dim_128")].status == \
        "unjudgeable"
    assert not [r for r in _rope_results(BF16_ANGLES, "conventional", properties=False)
                if r.grade == "reduced" and not r.failed]


@pytest.mark.slow
def test_pytest_plugin_takes_the_profile_from_its_option_or_ini(tmp_path: Any) -> None:
    import subprocess
    import sys

    from ..conftest import TESTS

    def pytest_run(*extra: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "--pyargs", "posenc.conformance",
             "--posenc-backend", "tests.harness.test_precision_profiles:BF16_ANGLES",
             "--posenc-encoding", "rope", "--posenc-dtype", "float32", "--posenc-mode",
             "eager", "-k", "batched_left_padding", "-q", "-p", "no:cacheprovider", *extra],
            capture_output=True, text=True, cwd=TESTS.parent, timeout=300)
        return proc.stdout

    assert "1 failed" in pytest_run("--posenc-precision", "conventional")
    assert "1 passed" in pytest_run("-o", "posenc_precision=reduced")


def test_an_unknown_profile_is_a_parameter_error() -> None:
    from posenc.conformance.runner import Runner

    with pytest.raises(posenc.ParameterError, match=r"Options\.precision='fuzzy'"):
        Runner(Options(backends=["numpy"], encodings=["rope"], precision="fuzzy"))
