"""Verdicts on someone else's code, both ways: a correct outside-style function (written here,
in plain NumPy float64, not posenc code) gets no FAIL and no ERROR through the real adapter and
``posenc check`` paths, and a mutant of it (off by one, a flipped direction) still FAILs.

One test per class of issue 29: a declared unsupported value honoured where a case leaves the
parameter at its default (1), outputs not shaped like the first input (2), integral floats
from an integer-valued encoding (3), scope by value at any depth and refusals (KeyError).
"""

from __future__ import annotations

import json
import math
from decimal import Decimal, localcontext
from typing import Any

import numpy as np
import pytest

from posenc.backends import adapters
from posenc.cli import main as posenc_main
from posenc.conformance import check
from posenc.errors import ParameterError

CASES = {"properties": False, "gradients": False}


def _statuses(report: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in report.results:
        out[r.status] = out.get(r.status, 0) + 1
    return out


def _no_false_alarm(report: Any) -> None:
    bad = [f"{r.check.id}: {r.message[:300]}" for r in report.results
           if r.status in ("fail", "error")]
    assert not bad, "\n".join(bad)
    assert report.in_scope > 0 and report.passed, report.text()


# -- class 1: a declared unsupported value, where a case leaves the parameter at its default --
ROPE_MODULE = '''
import numpy as np


def interleaved_rope(x, position_ids, theta=10000.0, shift=0):
    """Pairs (2i, 2i + 1), as Meta's and GPT-J's code; exact float64 angles."""
    x = np.asarray(x)
    d = x.shape[-1]
    inv_freq = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    angles = (np.asarray(position_ids, np.float64) + shift)[..., None] * inv_freq
    if angles.ndim == 3:  # [batch, seq, d/2] against x [batch, ..., seq, d]
        angles = angles.reshape(angles.shape[0], *([1] * (x.ndim - 3)), *angles.shape[1:])
    cos, sin = np.cos(angles), np.sin(angles)
    even, odd = x[..., 0::2].astype(np.float64), x[..., 1::2].astype(np.float64)
    out = np.empty(x.shape, np.float64)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out.astype(x.dtype)


def off_by_one(x, position_ids, theta=10000.0):
    return interleaved_rope(x, position_ids, theta, shift=1)
'''


def _cli(tmp_path: Any, capsys: Any, *args: str) -> tuple[int, str, dict[str, Any]]:
    out = tmp_path / "report.json"
    code = posenc_main(["check", *args, "--json", str(out)])
    text = capsys.readouterr()
    return code, text.out + text.err, json.loads(out.read_text()) if out.exists() else {}


def test_class1_declared_default_is_honoured_on_an_interleaved_only_rope(tmp_path: Any,
                                                                        capsys: Any) -> None:
    (tmp_path / "outside_rope.py").write_text(ROPE_MODULE)
    common = ["--map", "base=theta", "--map", "positions=position_ids", "--unsupported",
              "layout=half", "--framework", "numpy", "--dtype", "float32", "--only", "cases"]
    code, out, data = _cli(tmp_path, capsys, "rope",
                           f"{tmp_path}/outside_rope.py:interleaved_rope", *common)
    statuses = [r["status"] for r in data["results"]]
    assert code == 0 and "fail" not in statuses and "error" not in statuses, out
    assert "layout swapped" not in out
    by_name = {r["name"]: r for r in data["results"]}
    for name in ("half_default_positions", "batched_left_padding", "near_2_17"):  # default
        # fixed at interleaved, the half cases run through the feature permutation
        assert by_name[name]["status"] == "pass", by_name[name]
        assert by_name[name]["details"].get("pairing"), by_name[name]
    # without layout, declaring its default unsupported fixes it at the other value
    passed = {r["name"] for r in data["results"] if r["status"] == "pass"}
    assert {"interleaved_default_positions", "negative_positions"} <= passed
    code, out, data = _cli(tmp_path, capsys, "rope",
                           f"{tmp_path}/outside_rope.py:off_by_one", *common)
    failed = [r for r in data["results"] if r["status"] == "fail"]
    assert code == 1 and failed and not [r for r in data["results"] if r["status"] == "error"]
    assert {(r["diagnosis"] or {}).get("name") for r in failed} == {"positions_plus_one"}


# -- class 2: an output not shaped like the first input (T5's bias from its [buckets, heads]) --
def _t5_buckets(rel: Any, bidirectional: bool, num_buckets: int, max_distance: int) -> Any:
    """Mesh-TensorFlow's rule, logarithms in float64."""
    if bidirectional:
        per_side = num_buckets // 2
        offset, n = np.where(rel > 0, per_side, 0), np.abs(rel)
    else:
        per_side, offset, n = num_buckets, 0, np.maximum(-rel, 0)
    exact = per_side // 2
    far = exact + (np.log(np.maximum(n, 1) / exact) / math.log(max_distance / exact)
                   * (per_side - exact)).astype(np.int64)
    return offset + np.where(n < exact, n, np.minimum(far, per_side - 1))


def _t5_bias(table: Any, q_len: int, k_len: int, bidirectional: bool = True,
             num_buckets: int = 32, max_distance: int = 128, query_offset: int = 0,
             flip: bool = False) -> Any:
    """``[heads, q_len, k_len]`` from the ``[num_buckets, heads]`` table: key − query."""
    rel = np.arange(k_len)[None, :] - (query_offset + np.arange(q_len))[:, None]
    rel = -rel if flip else rel
    buckets = _t5_buckets(rel, bidirectional, num_buckets, max_distance)
    return np.moveaxis(np.asarray(table)[buckets], -1, 0)


def test_class2_an_output_shaped_unlike_its_input_is_checked_against_the_golden() -> None:
    correct = adapters.function("t5_bias", _t5_bias, framework="numpy")
    report = check(correct, "t5_bias", dtypes=["float64"], max_examples=3, gradients=False)
    _no_false_alarm(report)
    assert _statuses(report)["pass"] >= 8  # every case and the properties that run on NumPy

    def flipped(table: Any, q_len: int, k_len: int, bidirectional: bool = True,
                num_buckets: int = 32, max_distance: int = 128, query_offset: int = 0) -> Any:
        return _t5_bias(table, q_len, k_len, bidirectional, num_buckets, max_distance,
                        query_offset, flip=True)

    report = check(adapters.function("t5_bias", flipped, framework="numpy"), "t5_bias",
                   dtypes=["float64"], **CASES)
    assert report.failed and not _statuses(report).get("error"), report.text()

    def transposed(table: Any, q_len: int, k_len: int) -> Any:  # [q, k, heads]: wrong shape
        return np.moveaxis(_t5_bias(table, q_len, k_len), 0, -1)

    report = check(adapters.function("t5_bias", transposed, framework="numpy"), "t5_bias",
                   dtypes=["float64"], **CASES)
    shapes = [r for r in report.results if r.status == "fail"]
    assert shapes and all("shape" in r.message for r in shapes), report.text()


def test_class2_a_dtype_argument_and_an_optional_input_it_does_not_take() -> None:
    """Llama 4's query temperature: output [seq] in the dtype asked (not the int input's);
    a function without position_ids has the cases giving them out of its scope."""

    def attn_scale(cache_position: Any, floor_scale: int = 8192, scale: float = 0.1) -> Any:
        c = np.asarray(cache_position, np.int64)
        return 1.0 + scale * np.log1p(((c + 1) // floor_scale).astype(np.float64))

    report = check(adapters.function("query_temperature", attn_scale, framework="numpy"),
                   "query_temperature", dtypes=["float64"], max_examples=3, gradients=False)
    _no_false_alarm(report)
    assert any(reason.startswith("it takes no 'position_ids'") for reason in report.unsupported)


# -- class 3: an integer-valued encoding returned as integral floats (DeBERTa's log buckets) --
def _log_bucket(r: int, bucket_size: int, max_position: int, plus: int = 0,
                exact_ceil: bool = True) -> float:
    """One bucket from 60-digit logarithms; a tie (an integral log ratio) within 1e-40 of an
    integer is that integer."""
    mid = bucket_size // 2
    if abs(r) <= mid:
        return float(r)
    with localcontext() as ctx:
        ctx.prec = 60
        x = (Decimal(abs(r)) / mid).ln() / (Decimal(max_position - 1) / mid).ln() * (mid - 1)
        nearest = x.to_integral_value()
        step = int(nearest) if abs(x - nearest) < Decimal("1e-40") else math.ceil(x)
    magnitude = mid + step + plus if exact_ceil else mid + float(x)
    return float(magnitude if r > 0 else -magnitude)


def make_log_bucket_position(relative_pos: Any, bucket_size: int, max_position: int) -> Any:
    """transformers' signature; float64 results, as its float code returns floats."""
    rel = np.asarray(relative_pos)
    return np.vectorize(lambda r: _log_bucket(int(r), bucket_size, max_position),
                        otypes=[np.float64])(rel).reshape(rel.shape)


def test_class3_integral_floats_of_an_integer_encoding_are_judged_on_values(capsys: Any) -> None:
    adapter = adapters.bucket_function(make_log_bucket_position, encoding="deberta_bucket",
                                       framework="numpy")
    report = check(adapter, dtypes=["float64"], max_examples=3, gradients=False)
    _no_false_alarm(report)
    assert any("every value integral" in line for line in report.text().splitlines())
    code = posenc_main(["check", "deberta_bucket", f"{__name__}:make_log_bucket_position",
                        "--framework", "numpy", "--only", "cases"])  # the CLI, its own plan
    out = capsys.readouterr().out
    assert code == 0 and "plan: dtype float64 only" in out and " 0 failed" in out, out

    def plus_one(relative_pos: Any, bucket_size: int, max_position: int) -> Any:
        rel = np.asarray(relative_pos)
        return np.vectorize(lambda r: _log_bucket(int(r), bucket_size, max_position, plus=1),
                            otypes=[np.float64])(rel).reshape(rel.shape)

    def without_ceil(relative_pos: Any, bucket_size: int, max_position: int) -> Any:
        rel = np.asarray(relative_pos)
        return np.vectorize(lambda r: _log_bucket(int(r), bucket_size, max_position,
                                                  exact_ceil=False),
                            otypes=[np.float64])(rel).reshape(rel.shape)

    for mutant in (plus_one, without_ceil):
        report = check(adapters.bucket_function(mutant, encoding="deberta_bucket",
                                                framework="numpy"), dtypes=["float64"], **CASES)
        statuses = _statuses(report)
        assert statuses.get("fail") and not statuses.get("error"), report.text()


# -- scope by value at any depth; a KeyError for a rope type it lacks -------------------------
def half_rope(x: Any, position_ids: Any, theta: float = 10000.0, scaling: Any = None) -> Any:
    """Half pairing, float64 angles; schedules looked up by rope type in a table that has only
    the plain one (no scaling dict at all)."""
    kind = None if scaling is None else scaling.get("rope_type", scaling.get("type"))
    inv_freq = {None: lambda d: 1.0 / theta ** (np.arange(0, d, 2) / d)}[kind](x.shape[-1])
    angles = np.asarray(position_ids, np.float64)[..., None] * inv_freq
    if angles.ndim == 3:
        angles = angles.reshape(angles.shape[0], *([1] * (x.ndim - 3)), *angles.shape[1:])
    cos, sin = np.cos(angles), np.sin(angles)
    a, b = np.split(np.asarray(x, np.float64), 2, axis=-1)
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], -1).astype(x.dtype)


NAMES = {"base": "theta", "positions": "position_ids"}


def test_a_rope_type_the_implementation_lacks_is_explained_not_blamed() -> None:
    report = check(half_rope, "rope", names=NAMES, framework="numpy", dtypes=["float32"],
                   **CASES)
    _no_false_alarm(report)
    refused = [r for r in report.results if "KeyError" in r.message]
    assert refused and all(r.status == "unsupported" for r in refused)
    assert any(r.message.startswith("unsupported by the implementation: KeyError 'llama3' "
                                    "(scaling.rope_type='llama3'); declare it: ")
               and "--unsupported scaling.rope_type=llama3" in r.message for r in refused)

    rules = {"rope_type": ["llama3", "yarn", "linear", "dynamic", "longrope", "ntk",
                           "ntk_alpha", "proportional", "llama4"],
             "scaling.rope_type": {"default"}, "positions.ndim": 2}
    report = check(half_rope, "rope", names=NAMES, unsupported=rules, framework="numpy",
                   dtypes=["float32"], **CASES)
    _no_false_alarm(report)
    lines = report.text(verbose=True).splitlines()
    assert any("unsupported (" in line and "rope_type='llama3' is declared unsupported" in line
               for line in lines), lines  # the coverage lines say why
    assert any("positions.ndim=2 is declared unsupported" in line for line in lines), lines
    batched = {r.check.name: r for r in report.results}["batched_left_padding"]
    assert batched.status == "unsupported"

    def buggy(x: Any, position_ids: Any, theta: float = 10000.0) -> Any:  # its own KeyError
        return half_rope(x, position_ids, theta, scaling={"rope_type": "yarn"}) if \
            x.shape[-1] > 0 else None

    report = check(buggy, "rope", names=NAMES, framework="numpy", dtypes=["float32"], **CASES)
    assert _statuses(report).get("error") and not _statuses(report).get("pass")


def test_self_contradicting_declarations_are_parameter_errors(tmp_path: Any,
                                                             capsys: Any) -> None:
    with pytest.raises(ParameterError, match="'scaling_type' is not a parameter of rope"):
        adapters.rope_function(half_rope, NAMES, {"scaling_type": "ntk"})
    with pytest.raises(ParameterError, match=r"'positions\.shape' is not a parameter"):
        adapters.rope_function(half_rope, NAMES, {"positions.shape": 2})
    with pytest.raises(ParameterError, match="layout='interleaved' declares its pairing, and "
                                             "unsupported declares layout='interleaved'"):
        adapters.cos_sin_cache(lambda positions, dim: None, layout="interleaved",
                               unsupported={"layout": "interleaved"})
    (tmp_path / "outside_rope.py").write_text(ROPE_MODULE)
    code, out, _ = _cli(tmp_path, capsys, "rope", f"{tmp_path}/outside_rope.py:interleaved_rope",
                        "--adapter", "cache", "--layout", "half", "--unsupported", "layout=half")
    assert code == 2 and "--layout half" in out and "also unsupported" in out, out


def test_selectors_reach_any_depth_and_sets_of_values() -> None:
    from posenc.catalog import specs
    from posenc.conformance.runner import Check
    from posenc.conformance.selection import selects

    found = specs()

    def case(name: str) -> Check:
        return Check("b", "cpu", "float32", "eager", "rope", "case", name)

    assert selects("rope[scaling.rope_type in {yarn, llama3}]", case("near_2_20_llama3"), found)
    assert not selects("rope[scaling.rope_type in {yarn, linear}]", case("near_2_20_llama3"),
                       found)
    assert selects("rope[rope_type=linear, base=10000]", case("linear_scaling"), found)  # type
    assert not selects("rope[rope_type=linear]", case("two_dims"), found)
    assert selects("rope[positions.ndim=2]", case("batched_left_padding"), found)
    assert not selects("rope[positions.ndim=2]", case("two_dims"), found)
    assert selects("t5_[bc]*[num_buckets in [32, 64]]",
                   Check("b", "cpu", "float32", "eager", "t5_bucket", "case", "default_edges"),
                   found)


# -- posenc check's dtypes: float64 only where the function computes in float64 -------------
def test_posenc_check_probes_the_dtypes_a_function_computes_in() -> None:
    from posenc.conformance.dtype_probe import probe_dtypes

    def float32_angles(x: Any, position_ids: Any, theta: float = 10000.0) -> Any:
        d = x.shape[-1]
        inv_freq = (1.0 / theta ** (np.arange(0, d, 2) / d)).astype(np.float32)
        angles = np.asarray(position_ids, np.float32)[..., None] * inv_freq
        if angles.ndim == 3:
            angles = angles.reshape(angles.shape[0], *([1] * (x.ndim - 3)), *angles.shape[1:])
        a, b = np.split(np.asarray(x), 2, axis=-1)
        cos, sin = np.cos(angles), np.sin(angles)
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], -1).astype(x.dtype)

    def refuses_float16(x: Any, position_ids: Any, theta: float = 10000.0) -> Any:
        if x.dtype == np.float16:
            raise TypeError("half precision is not supported")
        return half_rope(x, position_ids, theta)

    def backend(fn: Any) -> Any:
        return adapters.rope_function(fn, NAMES, framework="numpy").backend()

    chosen, line = probe_dtypes(backend(float32_angles), "rope")
    assert chosen is not None and "float64" not in chosen and "float32" in chosen
    assert "float64: it computes in float32 (error" in line and line.startswith("plan: dtypes")
    chosen, line = probe_dtypes(backend(refuses_float16), "rope")
    assert chosen is not None and "float64" in chosen and "float16" not in chosen
    assert "float16: it raises TypeError: half precision is not supported" in line
    wrong_base = adapters.rope_function(lambda x, position_ids: half_rope(x, position_ids, 500.0),
                                        {"positions": "position_ids"}, framework="numpy")
    chosen, _ = probe_dtypes(wrong_base.backend(), "rope")  # far off: kept, for the checks
    assert chosen is not None and "float64" in chosen
    chosen, line = probe_dtypes(adapters.bucket_function(
        make_log_bucket_position, encoding="deberta_bucket", framework="numpy").backend(),
        "deberta_bucket")
    assert chosen == ["float64"] and "takes and returns integers" in line


def test_every_adapter_path_the_docs_name_imports() -> None:
    import importlib
    import importlib.util
    import re

    from ..conftest import ROOT

    text = "".join(page.read_text() for page in (ROOT / "README.md", *(ROOT / "docs").glob("*.md")))
    named = set(re.findall(r"\badapters\.([A-Za-z_]\w*)", text))
    assert {"transformers_config", "frequency_function", "as_backend"} <= named
    module = importlib.import_module("posenc.backends.adapters")
    assert not [name for name in sorted(named) if not hasattr(module, name)]
    def module_spec(path: str) -> Any:
        try:
            return importlib.util.find_spec(path)
        except ModuleNotFoundError:  # an attribute of a module, not a submodule
            return None

    for path in set(re.findall(r"`(posenc\.(?:backends|conformance)\.[\w.]+)", text)):
        head, _, attr = path.rpartition(".")  # a module, or an attribute of one (not imported:
        if module_spec(path) is None:  # the framework packages are heavy)
            assert importlib.util.find_spec(head) is not None, path
            if head.endswith(("adapters", "backends", "conformance")):
                assert hasattr(importlib.import_module(head), attr), path
