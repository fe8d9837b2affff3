"""Diagnoses (``diagnoses:`` in a spec): each declared one is detectable by the goldens and is
named when planted; correct and unrelated outputs get none; bad declarations fail at load."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from posenc import catalog, golden
from posenc.backends import get_backend
from posenc.backends.backend import Backend
from posenc.conformance import Options, findings, run
from posenc.conformance.diagnose import Diagnoser
from posenc.conformance.reports.report import document, failures
from posenc.conformance.tolerances import compare, tolerance_for
from posenc.diagnoses import Diagnosis, evaluate
from posenc.encodings import public_functions
from posenc.errors import SpecError
from posenc.paths import spec_dir
from posenc.specs import Spec, load_all, load_spec_file, resolve_params

SPECS = load_all()
DECLARED = [(spec_id, d.name) for spec_id, spec in SPECS.items() for d in spec.diagnoses]
MINIMUM = {"rope": 5, "t5_bucket": 3, "t5_bias": 3, "alibi_slopes": 3, "alibi_bias": 3,
           "sinusoidal": 3, "deberta_bucket": 3}


def _diagnosis(spec: Spec, name: str) -> Diagnosis:
    return next(d for d in spec.diagnoses if d.name == name)


def _scale(case: golden.GoldenCase) -> float:
    """The harness's comparison scale: the largest magnitude among the output and float inputs."""
    finite = case.output[np.isfinite(case.output)]
    floats = [float(np.abs(v).max(initial=0.0)) for v in case.inputs.values()
              if v is not None and v.dtype.kind == "f"]
    return max([float(np.abs(finite).max(initial=0.0)), *floats]) or 1.0


def _differs(spec: Spec, case: golden.GoldenCase, out: np.ndarray) -> bool:
    if out.shape != case.output.shape:
        return True
    if spec.output_kind == "int":
        return not np.array_equal(out, case.output)
    tol = tolerance_for("float64", spec.tolerances)
    return not compare(out, case.output, tol, scale=_scale(case),
                       angle_bound=case.angle_bound).ok


def _planted(spec: Spec, diagnosis: Diagnosis) -> Backend:
    """The numpy backend whose ``spec.function`` is the reference with the diagnosis applied."""
    reference = catalog.reference_function(spec)
    names = [i.name for i in spec.inputs]

    def planted(**kw: Any) -> np.ndarray:
        dtype = kw.pop("dtype", np.float64)
        inputs = {n: kw.pop(n, None) for n in names}
        out = golden.output_array(evaluate(diagnosis, reference, inputs,
                                           resolve_params(spec, kw)))
        return out.astype(np.int64 if spec.output_kind == "int" else dtype)

    return dataclasses.replace(get_backend("numpy"), name=f"planted_{diagnosis.name}",
                               overrides={spec.function: planted})


def _case_results(backend: Backend, encodings: list[str]) -> list[Any]:
    options = Options(backends=[backend], encodings=encodings, dtypes=["float64"],
                      modes=["eager"], properties=False, gradients=False)
    return run(options)


def test_the_issue_s_encodings_declare_enough_diagnoses() -> None:
    for spec_id, minimum in MINIMUM.items():
        assert len(SPECS[spec_id].diagnoses) >= minimum, spec_id


@pytest.mark.parametrize(("spec_id", "name"), DECLARED, ids=[f"{s}-{n}" for s, n in DECLARED])
def test_each_diagnosis_fails_the_correct_goldens(spec_id: str, name: str) -> None:
    spec = SPECS[spec_id]
    diagnosis = _diagnosis(spec, name)
    reference = catalog.reference_function(spec)
    failed = []
    for case in golden.load(spec).cases.values():
        try:
            out = golden.output_array(evaluate(diagnosis, reference, case.inputs,
                                               resolve_params(spec, case.params)))
        except Exception:  # not every diagnosis applies to every case
            continue
        if _differs(spec, case, out):
            failed.append(case.name)
    assert failed, f"{spec_id}: {name} matches every golden: no case can detect it"


@pytest.mark.parametrize(("spec_id", "name"), DECLARED, ids=[f"{s}-{n}" for s, n in DECLARED])
def test_each_diagnosis_is_identified_when_planted(spec_id: str, name: str) -> None:
    spec = SPECS[spec_id]
    results = _case_results(_planted(spec, _diagnosis(spec, name)), [spec_id])
    # where the diagnosis cannot be evaluated (longrope's factors are too few for the full
    # width) the planted backend raises: an error, which no diagnosis explains
    failed = [r for r in results if r.status == "fail"]
    assert failed, f"planting {name} fails no case"
    named = []
    for r in failed:
        found = r.details.get("diagnosis")
        assert found is not None, f"{r.check.id}: no diagnosis for the planted {name}: {r.message}"
        # another diagnosis may coincide with the planted one on a case (positions + 1 and
        # bfloat16 positions both turn 4095 into 4096): it is then listed as equally likely
        assert name in (found["name"], *found["also"]), (r.check.id, found)
        named.append(found["name"])
        assert "likely: " in r.message and found["explanation"] in r.message
    assert name in named, f"{name} is never the first diagnosis: {named}"


def test_a_correct_backend_has_no_diagnosis() -> None:
    results = _case_results(get_backend("numpy"), list(MINIMUM))
    assert results and not any(r.failed for r in results)
    assert all(entry["diagnosis"] is None for entry in document(results)["results"])


def _negated(function: str) -> Any:
    implementation = public_functions()[function]
    return lambda *args, **kw: -implementation(*args, **kw)


@pytest.mark.parametrize("function", ["rope", "t5_bias", "sinusoidal"])
def test_an_unrelated_bug_gets_no_diagnosis(function: str) -> None:
    """The whole output negated is none of the declared bugs of these encodings."""
    backend = dataclasses.replace(get_backend("numpy"), name="negated",
                                  overrides={function: _negated(function)})
    failed = [r for r in _case_results(backend, [function]) if r.failed]
    assert failed
    for r in failed:
        assert "diagnosis" in r.details and r.details["diagnosis"] is None, r.details
        assert "likely:" not in r.message


def test_the_report_and_the_summary_name_the_bug() -> None:
    spec = SPECS["rope"]
    results = _case_results(_planted(spec, _diagnosis(spec, "interleaved_for_half")), ["rope"])
    doc = json.loads(json.dumps(document(results), default=str))
    by_name = {entry["name"]: entry for entry in doc["results"]}
    assert by_name["half_default_positions"]["diagnosis"]["name"] == "interleaved_for_half"
    assert by_name["interleaved_default_positions"]["diagnosis"] is None  # passes
    text = failures(results)
    assert ("likely: layout swapped — output matches layout='interleaved' exactly: dims paired "
            "(2i, 2i+1) where (i, i+d/2) was asked") in text
    # every failure of the one bug is one finding
    failed = [r for r in results if r.failed]
    grouped = findings.group(results)
    assert len(grouped) == 1 and len(grouped[0].results) == len(failed) > 1
    assert (f"rope: layout swapped (interleaved_for_half) — {len(failed)} failing cases in "
            "float64: dims paired") in findings.text(results)


def test_failures_without_a_diagnosis_are_grouped_apart() -> None:
    backend = dataclasses.replace(get_backend("numpy"), name="negated",
                                  overrides={"rope": _negated("rope")})
    results = _case_results(backend, ["rope"]) + _case_results(
        _planted(SPECS["sinusoidal"], _diagnosis(SPECS["sinusoidal"], "base_10000")),
        ["sinusoidal"])
    grouped = {(f.encoding, f.diagnosis and f.diagnosis["name"]): len(f.results)
               for f in findings.group(results)}
    assert grouped == {("rope", None): sum(r.failed for r in results[:len(SPECS["rope"].cases)]),
                       ("sinusoidal", "base_10000"): 1}
    assert "rope: " in findings.text(results) and "no known bug matched" in findings.text(results)


def _rope_with(tmp_path: Path, entry: str) -> Path:
    text = (spec_dir() / "rope.yaml").read_text()
    head, _, _ = text.partition("\ndiagnoses:\n")
    path = tmp_path / "rope.yaml"
    path.write_text(f"{head}\ndiagnoses:\n{entry}")
    return path


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("  - {name: a, explanation: e, transform: positions_sideways}\n",
         "unknown transform 'positions_sideways'"),
        ("  - {name: a, explanation: e, params: {theta: 10000.0}}\n",
         "params.theta: the reference function has no parameter 'theta'"),
        ("  - {name: a, explanation: e, params: {layout: diagonal}}\n",
         "parameter layout='diagonal'"),
        ("  - {name: a, explanation: e, transform: t5_float32_log}\n",
         "transform 't5_float32_log' is written for the t5 reference, not 'rope'"),
        ("  - {name: a, explanation: e, transform: relative_position_negated}\n",
         "needs 'relative_position', which the spec does not declare"),
        ("  - {name: a, explanation: e, transform: output_negated}\n"
         "  - {name: a, explanation: f, transform: positions_plus_one}\n",
         "duplicate diagnosis name 'a'"),
        ("  - {name: a, explanation: e}\n", "diagnoses[0]"),
        ("  - {name: a, transform: output_negated}\n", "'explanation' is a required property"),
    ],
)
def test_a_diagnosis_the_reference_cannot_evaluate_is_a_spec_error(
        tmp_path: Path, entry: str, expected: str) -> None:
    path = _rope_with(tmp_path, entry)
    with pytest.raises(SpecError) as info:
        load_spec_file(path)
    assert str(path) in str(info.value) and expected in str(info.value)


def test_diagnoses_stay_out_of_the_golden_hash(tmp_path: Path) -> None:
    path = _rope_with(tmp_path, "  - {name: a, explanation: e, transform: output_negated}\n")
    assert load_spec_file(path).content_hash() == SPECS["rope"].content_hash()


def test_an_output_much_closer_to_a_diagnosis_than_to_the_golden_matches_it() -> None:
    """A layout swap seen through float32 angles misses its diagnosis's tolerance, yet lies
    CLOSER times nearer to it than to the golden; an output near the golden matches nothing."""
    spec = SPECS["rope"]
    case = golden.load(spec).cases["near_2_17"]
    tol = tolerance_for("float32", spec.tolerances)
    diagnoser = Diagnoser()
    swapped = diagnoser.output(spec, case, _diagnosis(spec, "interleaved_for_half"))
    assert swapped is not None
    noise = np.random.default_rng(0).uniform(-1e-3, 1e-3, swapped.shape)
    match = diagnoser.diagnose(spec, case, swapped + noise, tol, scale=_scale(case))
    assert match is not None and match.diagnosis.name == "interleaved_for_half"
    assert not match.strict and match.max_abs <= 1e-3
    assert diagnoser.diagnose(spec, case, case.output + noise, tol, scale=_scale(case)) is None


@pytest.mark.oracle
def test_transformers_bucket_functions_are_diagnosed_as_their_float32_logs() -> None:
    """transformers' T5 and DeBERTa-v2 buckets, through the harness: every failure they have is
    named, by the float32 logarithm (the documented ties) or DeBERTa's missing clamp."""
    torch = pytest.importorskip("torch")
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    deberta = pytest.importorskip("transformers.models.deberta_v2.modeling_deberta_v2")

    def t5_bucket(relative_position: np.ndarray, **params: Any) -> np.ndarray:
        p = resolve_params(SPECS["t5_bucket"], params)
        return t5.T5Attention._relative_position_bucket(
            torch.from_numpy(relative_position), **p).numpy()

    def deberta_bucket(relative_position: np.ndarray, **params: Any) -> np.ndarray:
        p = resolve_params(SPECS["deberta_bucket"], params)  # transformers never clamps
        out = deberta.make_log_bucket_position(torch.from_numpy(relative_position),
                                               p["bucket_size"], p["max_position"])
        return out.numpy().astype(np.int64)

    backend = dataclasses.replace(get_backend("numpy"), name="transformers", overrides={
        "t5_bucket": t5_bucket, "deberta_bucket": deberta_bucket})
    failed = [r for r in _case_results(backend, ["t5_bucket", "deberta_bucket"]) if r.failed]
    named = {(r.check.encoding, r.check.name): (r.details["diagnosis"] or {}).get("name")
             for r in failed}
    assert named == {
        ("t5_bucket", "float32_tie_long_range"): "float32_log",
        ("t5_bucket", "bidirectional_tie_long_range"): "float32_log",
        ("deberta_bucket", "float32_tie_ratio_16_9"): "float32_log",
        ("deberta_bucket", "float32_tie_ratio_7_3"): "float32_log",
        ("deberta_bucket", "v3_base_window_original"): "no_clamp",
        ("deberta_bucket", "v3_base_edges_original"): "no_clamp",
        ("deberta_bucket", "small_log_region_original"): "no_clamp",
    }


def _rope_float32_angles(x: np.ndarray, positions: np.ndarray | None = None,
                         **params: Any) -> np.ndarray:
    """RoPE as most ports compute it: angles m·θ multiplied in float32 (no bug, less precise)."""
    from posenc.rotary.schedules import frequencies, rotary_width

    p = resolve_params(SPECS["rope"], params)
    rd = p["rotary_dim"] or rotary_width(x.shape[-1], p["scaling"])
    pos = np.arange(x.shape[-2]) if positions is None else np.asarray(positions)
    seq_len = p["seq_len"] or (x.shape[-2] if positions is None else int(pos.max()) + 1)
    thetas, attention = frequencies(rd, p["base"], p["scaling"], seq_len)
    angles = pos[..., None].astype(np.float32) * np.asarray(thetas, np.float32)
    if angles.ndim == 3:  # [batch, seq, half] against x [batch, heads, seq, dim]
        angles = angles.reshape(angles.shape[0], *([1] * (x.ndim - 3)), *angles.shape[1:])
    cos, sin = np.cos(angles) * attention, np.sin(angles) * attention
    half = np.arange(rd // 2)
    a, b = (half, half + rd // 2) if p["layout"] == "half" else (2 * half, 2 * half + 1)
    out = x.astype(np.float32)
    out[..., a] = x[..., a] * cos - x[..., b] * sin
    out[..., b] = x[..., b] * cos + x[..., a] * sin
    return out.astype(x.dtype)


def test_float32_angles_fail_the_exact_goldens_without_a_diagnosis() -> None:
    """The usual float32 angle error is no porting bug: no declared diagnosis claims it."""
    backend = dataclasses.replace(get_backend("numpy"), name="float32_angles",
                                  overrides={"rope": _rope_float32_angles})
    options = Options(backends=[backend], encodings=["rope"], dtypes=["float32"],
                      modes=["eager"], properties=False, gradients=False)
    failed = [r for r in run(options) if r.failed]
    assert any(r.check.name == "near_2_17" for r in failed)
    assert all(r.status == "fail" and r.details["diagnosis"] is None for r in failed), failed


def test_a_diagnosis_that_raises_leaves_the_failure_a_failure(monkeypatch) -> None:
    def broken(*args: Any, **kw: Any) -> None:
        raise ZeroDivisionError("in a transform")

    monkeypatch.setattr(Diagnoser, "diagnose", broken)
    spec = SPECS["rope"]
    results = _case_results(_planted(spec, _diagnosis(spec, "theta_10000")), ["rope"])
    failed = [r for r in results if r.failed]
    assert failed and all(r.status == "fail" for r in failed)
    assert all(r.details["diagnosis"] is None and "could not be evaluated" in r.message
               for r in failed)


def test_alibi_queries_from_zero_equals_the_first_rows_of_the_square_bias() -> None:
    """The transform reads rows by distance (no k_len × k_len square); on small sizes it must
    equal the first q_len rows of the reference's square bias, bit for bit."""
    from posenc.diagnoses.alibi import queries_from_zero
    from posenc.reference.alibi import alibi_bias

    for form in ("causal", "symmetric", "key_only"):
        for heads, q_len, k_len in [(3, 2, 5), (12, 5, 5), (5, 1, 1), (4, 3, 9)]:
            params = dict(num_heads=heads, q_len=q_len, k_len=k_len, form=form, max_bias=8.0,
                          head_dim=None)
            fast = queries_from_zero(lambda **p: alibi_bias(**p), {}, params)
            square = np.asarray(alibi_bias(**{**params, "q_len": k_len}))
            expected = square if form == "key_only" else square[:, :q_len]
            assert fast.shape == expected.shape and np.array_equal(fast, expected), params
