"""Failures a user can act on: parameters and input shapes in the message and the JSON,
plain integers, the frame that raised, the tolerance's reason, and no Hypothesis explanation
pointing into the harness."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from posenc.backends import get_backend
from posenc.catalog import specs
from posenc.conformance import Options, run
from posenc.conformance.messages import HARNESS, notes, number, plain
from posenc.conformance.reports import report
from posenc.conformance.tolerances import tolerance_for

from ..mutants import overrides


def _rope(backend: Any, **kw: Any) -> list[Any]:
    return run(Options(backends=[backend], encodings=["rope"], dtypes=["float64"],
                       modes=["eager"], max_examples=4, gradients=False, **kw))


def test_numbers_print_plainly() -> None:
    import numpy as np

    assert number(np.float64(28.0)) == "28"
    assert number(np.float32(0.5)) == "0.5"
    assert number(np.int64(-3)) == "-3"
    assert plain("got np.float64(28.0), expected np.float64(27.5) at np.int64(4)") == \
        "got 28, expected 27.5 at 4"


def test_a_case_failure_records_params_inputs_and_the_tolerance_reason(tmp_path) -> None:
    results = _rope(overrides.OFF_BY_ONE, properties=False)
    failed = {r.check.name: r for r in results if r.failed}
    r = failed["llama_head_dim_128"]
    assert r.details["params"] == {"base": 500000.0}
    assert r.details["inputs"] == {"x": {"shape": [1, 2, 6, 128], "dtype": "float64"},
                                   "positions": {"shape": [6], "dtype": "int64"}}
    reason = tolerance_for("float64", specs()["rope"].tolerances).reason
    assert "params: base=500000" in r.message
    assert "inputs: x float64[1, 2, 6, 128], positions int64[6]" in r.message
    assert f"tolerance: {reason}" in r.message
    report.to_json(results, tmp_path / "r.json")
    entry = next(e for e in json.loads((tmp_path / "r.json").read_text())["results"]
                 if e["name"] == "llama_head_dim_128")
    assert entry["params"] == {"base": 500000.0} and entry["inputs"]["x"]["shape"] == [1, 2, 6, 128]
    assert entry["grade"] == r.grade and entry["provided_by"] == "backend"
    assert "params" not in entry["details"]


def test_a_property_failure_shows_the_example_not_the_harness() -> None:
    results = _rope(overrides.OFF_BY_ONE, cases=False)
    r = next(r for r in results if r.check.name == "rope_identity_at_zero")
    assert r.failed
    assert "seed=" in r.message  # Hypothesis's failing example stays
    assert "np.float64(" not in r.message and "np.int64(" not in r.message
    assert str(HARNESS) not in r.message, r.message
    assert r.details["inputs"]["positions"] == {"shape": [5], "dtype": "int64"}
    for r in results:
        assert "np.float64(" not in r.message, r.message


def test_explanation_lines_into_the_harness_are_dropped() -> None:
    exc = AssertionError("boom")
    exc.add_note("Falsifying example: check(\n    seed=np.int64(3),\n)")
    exc.add_note("Explanation:\n    These lines were always and only run by failing examples:\n"
                 f"        {HARNESS / 'context.py'}:150\n        {HARNESS / 'tolerances.py'}:99")
    exc.add_note(f"Explanation:\n    These lines were always and only run by failing examples:\n"
                 f"        /somewhere/adapter.py:12\n        {HARNESS / 'context.py'}:150")
    text = "\n".join(notes(exc))
    assert "seed=3" in text
    assert "context.py" not in text and "tolerances.py" not in text
    assert "/somewhere/adapter.py:12" in text and text.count("Explanation") == 1


def _raises(x: Any, positions: Any = None, **kw: Any) -> Any:
    return {}["missing"]  # a bug in the adapter


def test_an_exception_names_the_frame_that_raised() -> None:
    backend = dataclasses.replace(get_backend("numpy"), name="buggy", overrides={"rope": _raises})
    results = _rope(backend, properties=False)
    r = results[0]
    assert r.status == "error"
    assert r.message.startswith("KeyError: 'missing'")
    assert "test_failure_messages.py:" in r.message and "in _raises" in r.message
    assert r.details["params"] == r.details["params"] and "inputs" in r.details


def test_no_hypothesis_explanation_reaches_a_failing_propertys_message(monkeypatch) -> None:
    """The harness runs without Hypothesis' explain phase (it reran a shrunk failure hundreds
    of times: 9 of 10 s of a failing property), so no explanation of harness lines is made, and
    the message still names the failing example."""
    from posenc.conformance import messages
    from posenc.conformance.runner import Runner

    raw: list[str] = []
    keep = messages.notes

    def spy(exc: BaseException) -> list[str]:
        raw.extend(getattr(exc, "__notes__", []))
        return keep(exc)

    monkeypatch.setattr(messages, "notes", spy)
    options = Options(backends=[overrides.SWAPPED_LAYOUT], encodings=["rope"],
                      dtypes=["float32"], modes=["eager"], max_examples=25, cases=False,
                      gradients=False)
    with Runner(options) as runner:
        check = next(c for c in runner.plan() if c.name == "rope_layout_permutation")
        result = runner.execute(check)
    assert result.failed
    explained = "\n".join(raw)
    assert "Explanation" not in explained and str(HARNESS / "tolerances.py") not in explained, raw
    assert "Explanation" not in result.message and str(HARNESS) not in result.message
    assert "These lines" not in result.message
    assert "seed=" in result.message


def test_the_positions_at_the_worst_index_are_shown() -> None:
    import numpy as np

    from posenc.conformance.messages import at_index

    positions = np.array([100, 101, 102, 103, 104, 105])
    # rope: positions [seq] against x [batch, heads, seq, dim]
    assert at_index({"positions": positions}, (1, 2, 6, 128), (0, 1, 4, 7)) == {"positions": 104}
    # [batch, seq] against [batch, heads, seq, dim]
    rows = np.array([[0, 0, 1], [5, 6, 7]])
    assert at_index({"positions": rows}, (2, 4, 3, 8), (1, 3, 2, 0)) == {"positions": 7}
    # relative positions shaped like the result; sinusoidal's [..., seq] -> [..., seq, dim]
    assert at_index({"rel": rows}, (2, 3), (1, 0)) == {"rel": 5}
    assert at_index({"positions": rows}, (2, 3, 16), (0, 2, 9)) == {"positions": 1}
    assert at_index({"positions": positions}, (4, 4), (0, 0)) == {}

    results = _rope(overrides.OFF_BY_ONE, properties=False)
    r = next(r for r in results if r.check.name == "llama_head_dim_128")
    worst = r.details["worst_index"]
    assert r.details["at_worst"] == {"positions": 100 + worst[-2]}
    assert f"at the worst index: positions={100 + worst[-2]}" in r.message
