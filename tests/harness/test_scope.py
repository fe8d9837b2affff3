"""Scope and provenance: what an implementation does not cover reports ``unsupported`` with
the reason, and an override backend is checked only on what it provides."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

import posenc
from posenc.backends import get_backend
from posenc.catalog import specs
from posenc.conformance import Options, run
from posenc.conformance.reports import report
from posenc.conformance.scope import provided_by
from posenc.encodings import public_functions

from ..conftest import TESTS, run_cli

NUMPY = get_backend("numpy")
_ROPE = public_functions()["rope"]


def _half_only(x: Any, positions: Any = None, *, layout: str = "half", **kw: Any) -> Any:
    if layout != "half":
        raise posenc.Unsupported(f"layout={layout!r} is not implemented")
    return _ROPE(x, positions, layout=layout, **kw)


def _no_scaling(x: Any, positions: Any = None, *, scaling: Any = None, **kw: Any) -> Any:
    if scaling is not None:
        raise NotImplementedError("scaling dicts")
    return _ROPE(x, positions, **kw)


def _results(backend: Any, encodings: list[str], **kw: Any) -> list[Any]:
    return run(Options(backends=[backend], encodings=encodings, dtypes=["float64"],
                       modes=["eager"], max_examples=4, **kw))


def test_raising_unsupported_or_not_implemented_reports_unsupported_with_the_reason() -> None:
    for impl, reason, needle in ((_half_only, "layout='interleaved' is not implemented",
                                  "interleaved"),
                                 (_no_scaling, "scaling dicts", "llama3")):
        backend = dataclasses.replace(NUMPY, name="partial", overrides={"rope": impl})
        results = _results(backend, ["rope"], gradients=False)
        assert not [r for r in results if r.failed], report.failures(results)
        out = [r for r in results if r.status == "unsupported"]
        assert out and any(needle in r.check.name or needle in r.check.id for r in out)
        for r in out:
            assert r.message.startswith(reason), r.message
            assert f"in {impl.__name__}" in r.message  # the frame that raised
        assert any(r.status == "pass" for r in results)


def test_declared_scope_is_unsupported_without_calling_the_implementation() -> None:
    calls: list[dict[str, Any]] = []

    def rope(x: Any, positions: Any = None, **kw: Any) -> Any:
        calls.append(kw)
        return _ROPE(x, positions, **kw)

    def scope(function: str, params: dict[str, Any]) -> str | None:
        assert function == "rope"
        return "interleaved is not ours" if params.get("layout") == "interleaved" else None

    backend = dataclasses.replace(NUMPY, name="scoped", overrides={"rope": rope}, scope=scope)
    results = _results(backend, ["rope"], properties=False, gradients=False)
    by_name = {r.check.name: r for r in results}
    assert by_name["interleaved_default_positions"].status == "unsupported"
    assert "interleaved is not ours" in by_name["interleaved_default_positions"].message
    assert by_name["half_default_positions"].status == "pass"
    assert not any(kw.get("layout") == "interleaved" for kw in calls)
    assert not [r for r in results if r.failed]


def test_an_override_backend_is_checked_only_on_what_it_provides() -> None:
    backend = dataclasses.replace(NUMPY, name="rope-only", overrides={"rope": _ROPE})
    results = _results(backend, ["rope", "t5_bucket"], gradients=False)
    t5 = [r for r in results if r.check.encoding == "t5_bucket"]
    assert t5 and all(r.status == "unsupported" for r in t5)
    assert all(r.message.startswith("not provided by rope-only; posenc's own code would be "
                                    "checked") for r in t5)
    rope = [r for r in results if r.check.encoding == "rope"]
    assert rope and all(r.status == "pass" and r.provided_by == "backend" for r in rope)
    total = len(specs()["t5_bucket"].cases) + len(specs()["t5_bucket"].properties)
    rows = {line.split()[0]: line for line in report.matrix(results).splitlines()}
    assert rows["t5_bucket"].split()[1:] == ["unsupported"]
    assert len(t5) == total
    assert f"in scope: {len(rope)} of {len(results)} checks" in report.closing_line(results)

    everything = _results(backend, ["t5_bucket"], gradients=False, include_posenc_code=True)
    assert everything and all(r.status == "pass" and r.provided_by == "posenc"
                              for r in everything)


def test_framework_backends_and_own_code_backends_provide_everything() -> None:
    rope = specs()["rope"]
    assert provided_by(NUMPY, rope, "case") == "backend"
    kernel = dataclasses.replace(NUMPY, overrides={"rope": _ROPE}, own_code=True)
    assert provided_by(kernel, specs()["t5_bucket"], "case") == "backend"
    layers = dataclasses.replace(NUMPY, functions=frozenset({"rope"}))
    assert provided_by(layers, rope, "case") == "backend"
    # a FlexAttention factory override provides its property, not the encoding's cases
    t5_bias = specs()["t5_bias"]
    flex = dataclasses.replace(NUMPY, overrides={"t5_score_mod": object()})
    index = next(i for i, p in enumerate(t5_bias.properties) if p.name == "t5_flex_score_mod")
    assert provided_by(flex, t5_bias, "property", index) == "backend"
    assert provided_by(flex, t5_bias, "case") == "posenc"


def test_torch_triton_declares_its_other_encodings_its_own() -> None:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return
    from posenc.backends.torch_triton import BACKEND

    assert BACKEND.own_code and BACKEND.overrides.keys() == {"rope"}


@pytest.mark.slow
def test_cli_include_posenc_code_labels_the_results(tmp_path) -> None:
    module = tmp_path / "rope_only_adapter.py"
    module.write_text("import dataclasses\nfrom posenc.backends import get_backend\n"
                      "from posenc.encodings import public_functions\n"
                      "BACKEND = dataclasses.replace(get_backend('numpy'), name='rope-only', "
                      "overrides={'rope': public_functions()['rope']})\n")
    base = ["conformance", "--backend", "rope_only_adapter:BACKEND", "--encoding", "rope",
            "--encoding", "t5_bucket", "--dtype", "float64", "--mode", "eager", "--only",
            "cases", "-q", "--json"]
    env = {"PYTHONPATH": f"{tmp_path}:{TESTS.parent}"}
    proc = run_cli(*base, str(tmp_path / "a.json"), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "in scope:" in proc.stdout
    data = json.loads((tmp_path / "a.json").read_text())
    t5 = [e for e in data["results"] if e["encoding"] == "t5_bucket"]
    assert t5 and all(e["status"] == "unsupported" for e in t5)
    proc = run_cli(*base, str(tmp_path / "b.json"), "--include-posenc-code", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "b.json").read_text())
    labels = {(e["encoding"], e["status"], e["provided_by"]) for e in data["results"]}
    assert labels == {("rope", "pass", "backend"), ("t5_bucket", "pass", "posenc")}


def test_an_implementation_refusing_arguments_under_compile_reports_unsupported() -> None:
    """torch.compile wraps a NotImplementedError raised while tracing in its own error; the
    harness asks the eager call, which refuses the same arguments: unsupported, not error."""
    import dataclasses

    import pytest

    pytest.importorskip("torch")
    from posenc import Unsupported as OutOfScope
    from posenc.backends import get_backend
    from posenc.conformance import Options, run
    from posenc.encodings import public_functions

    slopes = public_functions()["alibi_slopes"]

    def no_half(*args, dtype=None, **kwargs):
        if "16" in str(dtype):
            raise OutOfScope(f"dtype={dtype}: not in this implementation")
        return slopes(*args, dtype=dtype, **kwargs)

    backend = dataclasses.replace(get_backend("torch"), name="no-half",
                                  overrides={"alibi_slopes": no_half})
    results = run(Options(backends=[backend], encodings=["alibi_slopes"],
                          dtypes=["bfloat16", "float32"], modes=["compiled"], properties=False,
                          compiled_cases=1))
    status = {r.check.dtype: r.status for r in results}
    assert status == {"bfloat16": "unsupported", "float32": "pass"}, [
        (r.check.id, r.status, r.message[:200]) for r in results]
    assert "not in this implementation" in next(r.message for r in results
                                                if r.check.dtype == "bfloat16")
