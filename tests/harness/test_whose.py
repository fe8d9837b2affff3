"""Whose limit a failing check shows, planted four ways: the implementation's bug (a wrong
output, a crash in its code), posenc's limit (its adapter raises; its supplied cos/sin carry
the error a diagnosis names), the framework's bug (a control with no code under test fails).
Each message says whose, and none blames the implementation for posenc's or the framework's."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from posenc.backends import adapters, rotary_adapters
from posenc.catalog import reference_function, specs
from posenc.conformance import check
from posenc.diagnoses.base import evaluate
from posenc.golden import output_array
from posenc.specs import resolve_params

from ..conftest import run_python

torch = pytest.importorskip("torch")

NAMES = {"base": "theta", "positions": "position_ids"}
CASES = {"properties": False, "gradients": False, "dtypes": ["float32"]}


def _rope(x: Any, position_ids: Any, theta: float = 10000.0, pairs: str = "half") -> Any:
    """A float64-angle rope in NumPy; ``pairs="interleaved"`` plants the layout swap."""
    d = x.shape[-1]
    angles = np.asarray(position_ids, np.float64)[..., None] * theta ** (-np.arange(0, d, 2) / d)
    if angles.ndim == 3:
        angles = angles.reshape(angles.shape[0], *([1] * (x.ndim - 3)), *angles.shape[1:])
    x64 = np.asarray(x, np.float64)
    a, b = (x64[..., 0::2], x64[..., 1::2]) if pairs == "interleaved" else np.split(x64, 2, -1)
    cos, sin = np.cos(angles), np.sin(angles)
    first, second = a * cos - b * sin, b * cos + a * sin
    out = (np.stack([first, second], -1).reshape(x.shape) if pairs == "interleaved"
           else np.concatenate([first, second], -1))
    return out.astype(x.dtype)


def _rotate_half(x: Any) -> Any:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rotary_pos_emb(q: Any, k: Any, cos: Any, sin: Any) -> Any:
    """transformers' apply_rotary_pos_emb (cos/sin [batch, seq, dim]): correct."""
    cos, sin = cos[:, None], sin[:, None]
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def _failing(report: Any) -> list[Any]:
    return [r for r in report.results if r.status in ("fail", "error")]


def test_the_implementations_wrong_output_is_its_own() -> None:
    def swapped(x: Any, position_ids: Any, theta: float = 10000.0) -> Any:
        return _rope(x, position_ids, theta, pairs="interleaved")

    failing = _failing(check(swapped, "rope", names=NAMES, framework="numpy", **CASES))
    assert failing and all(r.details["whose"] == "implementation" for r in failing)
    named = [r for r in failing if (r.details.get("diagnosis") or {}).get("name")]
    assert named and all("likely: layout swapped" in r.message for r in named)
    assert all(r.message.splitlines()[1].startswith("whose: the implementation's (its output")
               for r in failing)


def test_the_implementations_crash_is_its_own() -> None:
    def crashes(x: Any, position_ids: Any, theta: float = 10000.0) -> Any:
        raise ValueError("shape mismatch in my kernel")

    report = check(crashes, "rope", names=NAMES, framework="numpy", **CASES)
    errors = [r for r in report.results if r.status == "error"]
    assert errors and all(r.details["whose"] == "implementation" for r in errors)
    assert all("whose: the implementation's (raised while it ran)" in r.message for r in errors)


def test_a_crash_in_posencs_adapter_is_posencs(monkeypatch: Any) -> None:
    """posenc's apply adapter fails before the implementation runs (planted: its cos/sin
    source called with arguments it does not take): posenc's, not the implementation's."""
    monkeypatch.setattr(rotary_adapters, "reference_cos_sin", rotary_adapters.rotary.widen)
    report = check(adapters.apply_rotary(apply_rotary_pos_emb), "rope", **CASES)
    errors = [r for r in report.results if r.status == "error"]
    assert errors and all(r.details["whose"] == "posenc" for r in errors), report.text()
    assert all("whose: posenc's, not the implementation's (raised in posenc's adapter at "
               in r.message and "outside the implementation)" in r.message for r in errors)


def _bfloat16_angle_cos_sin(x: Any, positions: Any, params: Any) -> tuple[Any, Any]:
    """posenc's cos/sin with a planted limit: angles rounded to bfloat16 (the declared
    diagnosis angles_in_bfloat16 evaluated on the unit vectors reference_cos_sin reads)."""
    spec = specs()["rope"]
    diagnosis = next(d for d in spec.diagnoses if d.name == "angles_in_bfloat16")
    seq, dim = int(x.shape[-2]), int(x.shape[-1])
    pos = None if positions is None else np.asarray(positions.cpu().numpy())
    batch = pos.shape[0] if pos is not None and pos.ndim == 2 else 1
    probe = np.zeros((batch, seq, dim))
    probe[..., : dim // 2] = 1.0
    resolved = resolve_params(spec, {**dict(params), "layout": "half"})
    out = output_array(evaluate(diagnosis, reference_function(spec),
                                {"x": probe, "positions": pos}, resolved))
    return out[..., : dim // 2], out[..., dim // 2:]


def test_a_bug_in_what_posenc_supplies_is_never_the_implementations(monkeypatch: Any) -> None:
    monkeypatch.setattr(rotary_adapters, "reference_cos_sin", _bfloat16_angle_cos_sin)
    report = check(adapters.apply_rotary(apply_rotary_pos_emb), "rope",
                   skip=["*[scaling.rope_type=*]", "*[scaling.type=*]", "*[rotary_dim=*]"],
                   **CASES)
    named = [r for r in _failing(report)
             if (r.details.get("diagnosis") or {}).get("name") == "angles_in_bfloat16"]
    assert named, report.text()
    for r in named:
        assert r.details["whose"] == "posenc" and r.details["diagnosis"]["whose"]
        assert "not the implementation's: posenc's inputs explain it (posenc computes the " \
               "angles and supplies cos/sin in q's dtype" in r.message
        assert "whose: posenc's, not the implementation's" in r.message
        assert "likely: bfloat16 angles" not in r.message
    assert "given in q's dtype" in report.text()  # what posenc supplies, said with its dtype


@pytest.mark.slow
def test_a_failing_framework_control_is_the_frameworks() -> None:
    """flex_attention's control (compiled vs eager with no score_mod) planted wrong, and the
    check's comparison planted to fail (an allowance below zero): an xfail worded as torch's.
    In a fresh process: the compiled kernels it builds would stay in this one's Inductor. One
    flex property runs (the others are skipped): it is all this test reads, and each property
    compiles kernels of its own (cold, 5 s or more each)."""
    code = (
        "import json\n"
        "from posenc.conformance import Options, run\n"
        "from posenc.conformance.properties import flex_score_mods as flex\n"
        "flex.control_error = lambda *args, **kwargs: 1e9\n"
        "flex.output_error_bound = lambda *args, **kwargs: -1e9\n"
        "results = run(Options(backends=['torch'], encodings=['alibi_bias'], dtypes=['float32'],\n"
        "                      modes=['compiled'], cases=False, gradients=False,\n"
        "                      skip=['*/property:alibi_[!f]*', '*/property:alibi_falcon*',\n"
        "                            '*/property:alibi_flex_score_mod?form=[!c]*'],\n"
        "                      max_examples=2))\n"
        "print(json.dumps([[r.check.name, r.status, r.details.get('whose'), r.message]\n"
        "                  for r in results]))\n")
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    flex_results = [r for r in results if r[0].startswith("alibi_flex_score_mod")]
    assert [r[0] for r in results] == ["alibi_flex_score_mod[form=causal]"], proc.stdout
    for _, status, whose, message in flex_results:
        assert (status, whose) == ("xfail", "framework"), message
        assert "compiled flex_attention is wrong here" in message
        assert "whose: the framework's, not the implementation's" in message
