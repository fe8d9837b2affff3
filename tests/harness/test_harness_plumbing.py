"""Plumbing the relative encodings rely on: integer outputs, shared reference modules, functions
whose only array is their result (namespace from dtype), and masked (-inf) score entries."""

from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import pytest

from posenc import array_api
from posenc.backends import get_backend
from posenc.catalog import reference_module, specs
from posenc.conformance.context import CheckFailure, Context
from posenc.conformance.tolerances import compare, tolerance_for
from posenc.errors import ParameterError, SpecError
from posenc.paths import spec_dir
from posenc.specs import load_spec_file

INF = np.inf


def test_equal_infinities_compare_equal_and_unequal_ones_do_not() -> None:
    tol = tolerance_for("float32")
    assert compare(np.array([-INF, 1.0, INF]), np.array([-INF, 1.0, INF]), tol, scale=1.0).ok
    for got, want in [([-INF], [INF]), ([1.0], [-INF]), ([-INF], [1.0]), ([np.nan], [-INF])]:
        result = compare(np.array(got), np.array(want), tol, scale=1.0)
        assert not result.ok and result.max_abs == INF


def test_spec_module_defaults_to_the_id(tmp_path) -> None:
    text = (spec_dir() / "learned.yaml").read_text()
    assert load_spec_file(spec_dir() / "learned.yaml").module == "learned"
    path = tmp_path / "learned.yaml"
    path.write_text("module: shared_learned\n" + text)
    spec = load_spec_file(path)
    assert spec.module == "shared_learned" and spec.id == "learned"
    with pytest.raises(SpecError, match=r"no reference module posenc/reference/shared_learned\.py"):
        reference_module(spec)
    path.write_text("module: Not-A-Module\n" + text)
    with pytest.raises(SpecError, match="module"):
        load_spec_file(path)


def _context(kind: str) -> Context:
    spec = specs()["learned"]
    data = {**spec.data, "output": {**spec.data["output"], "kind": kind}}
    spec = dataclasses.replace(spec, data=data)
    return Context(backend=get_backend("numpy"), spec=spec, dtype="float32", mode="eager",
                   device="cpu", tol=tolerance_for("float32"))


def test_integer_outputs_must_keep_the_index_dtype() -> None:
    ctx = _context("int")
    assert ctx.spec.output_kind == "int"
    ctx.check_array(np.array([3, -1], dtype=np.int64))
    for wrong in (np.float32, np.int32):
        with pytest.raises(CheckFailure, match="expected int64"):
            ctx.check_array(np.array([3, -1], dtype=wrong))
    _context("float").check_array(np.array([1.5], dtype=np.float32))
    with pytest.raises(CheckFailure, match="expected float32"):
        _context("float").check_array(np.array([1], dtype=np.int64))


LIBRARIES = {"numpy": "numpy", "strict": "array_api_strict", "torch": "torch", "jax": "jax",
             "tensorflow": "tensorflow"}


@pytest.mark.parametrize("name", list(LIBRARIES))
def test_a_dtype_names_its_namespace(name: str) -> None:
    pytest.importorskip(LIBRARIES[name])
    if name == "tensorflow":
        pytest.importorskip("torch")  # torch before TensorFlow (the other order has crashed)
    backend = get_backend(name)
    xp = backend.namespace()
    dtype = backend.dtype("float32")
    found = array_api.namespace_of_dtype(dtype)
    assert found.float32 == xp.float32
    assert array_api.output_dtype(found, dtype) == dtype
    assert array_api.output_dtype(found, None) == found.float32
    with pytest.raises(ParameterError, match="dtype must be a real floating dtype"):
        array_api.output_dtype(found, backend.dtype("int64"))


def test_no_dtype_means_numpy_and_a_stranger_is_refused() -> None:
    assert array_api.namespace_of_dtype(None).__name__ == "array_api_compat.numpy"
    assert array_api.namespace_of_dtype(np.float64).__name__ == "array_api_compat.numpy"
    with pytest.raises(ParameterError, match=r"dtype='float32' is a name: pass a dtype object"):
        array_api.namespace_of_dtype("float32")
    with pytest.raises(ParameterError, match=r"dtype=<object .*> is not a dtype of a supported"):
        array_api.namespace_of_dtype(object())


def test_device_names_become_framework_devices() -> None:
    torch = pytest.importorskip("torch")
    assert get_backend("torch").device_object("cpu") == torch.device("cpu")
    assert get_backend("numpy").device_object("cpu") == "cpu"


@pytest.mark.parametrize("name", list(LIBRARIES))
def test_convenience_functions_default_to_their_backend_float32(name: str) -> None:
    pytest.importorskip(LIBRARIES[name])
    if name == "tensorflow":
        pytest.importorskip("torch")
    backend = get_backend(name)
    pe = importlib.import_module(f"posenc.backends.{name}")
    table = pe.sinusoidal([0, 1], 4)
    assert array_api.dtype_name(table.dtype) == "float32"
    assert array_api.library_of(table) == array_api.library_of(backend.from_numpy(np.zeros(1), "float32",
                                                                     None))


def test_an_encoding_module_can_import_another_from_a_cold_start() -> None:
    from ..conftest import run_python

    proc = run_python("import posenc; f = posenc.attention; import posenc.encodings.sinusoidal")
    assert proc.returncode == 0, proc.stderr
    assert run_python("import posenc; posenc._no_such").returncode != 0


def test_masked_golden_entries_do_not_widen_the_tolerance() -> None:
    """A -inf entry (a masked score) must not make the case's scale infinite."""
    from posenc.conformance import Options
    from posenc.conformance.runner import Runner

    expected = np.array([[0.5, -INF], [0.25, 1.0]])
    ctx = _context("float")
    with Runner(Options(backends=["numpy"], encodings=["learned"])) as runner:
        case = runner._golden("learned").cases["bert_like"]
        case = dataclasses.replace(case, output=expected)
        runner._goldens["learned"].cases["bert_like"] = case
        ctx.run = lambda inputs, **params: expected + np.array([[0.0, 0.0], [0.0, 1e-3]])
        with pytest.raises(CheckFailure, match=r"max abs error 1\.000e-03"):
            runner._check_case(ctx, "bert_like")
        ctx.run = lambda inputs, **params: expected
        runner._check_case(ctx, "bert_like")


def _examples_tried(mode: str) -> list[int]:
    """The examples a failing property saw: Hypothesis shrinks in eager mode only."""
    from hypothesis import strategies as st

    ctx = dataclasses.replace(_context("float"), mode=mode, max_examples=20)
    seen: list[int] = []

    def fails_from_100(n: int) -> None:
        seen.append(n)
        assert n < 100

    with pytest.raises(AssertionError):
        ctx.given(n=st.integers(0, 10_000))(fails_from_100)
    return seen


def test_a_failing_property_is_not_shrunk_in_compiled_mode() -> None:
    """Every example a compiled property tries may be a new compilation: shrinking a failure
    there ran for minutes. Eager mode still shrinks to the smallest failing example."""
    eager, compiled = _examples_tried("eager"), _examples_tried("compiled")
    assert min(n for n in eager if n >= 100) == 100  # shrunk to the boundary
    assert len(compiled) < len(eager)
    assert compiled[-1] >= 100 and all(n < 100 for n in compiled[:-2])
