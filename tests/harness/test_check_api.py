"""``posenc.conformance.check`` and the adapters: every shape of someone else's function, correct
(passes, labelled as the backend's) and with a planted bug (fails, named by its diagnosis);
bad mappings and bad return values."""

from __future__ import annotations

import math
from typing import Any

import pytest

from posenc.backends import adapters
from posenc.conformance import check
from posenc.errors import ParameterError

torch = pytest.importorskip("torch")

FAST = {"dtypes": ["float32"], "max_examples": 4, "gradients": False}


def _rotate_half(x: Any) -> Any:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def _inv_freq(dim: int, theta: float) -> Any:
    return 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)


def _angles(position_ids: Any, dim: int, theta: float, x: Any) -> Any:
    ang = position_ids.to(torch.float64)[..., None] * _inv_freq(dim, theta)
    if position_ids.ndim == 2:  # [batch, seq] lines up with x[b, ..., s, :]
        ang = ang.reshape(ang.shape[0], *([1] * (x.ndim - 3)), *ang.shape[1:])
    return torch.cat([ang, ang], dim=-1)


def my_rope(x: Any, position_ids: Any, theta: float = 10000.0) -> Any:
    """A porter's half-layout rope, angles in float64: no scaling, no partial rotary."""
    emb = _angles(position_ids, x.shape[-1], theta, x)
    out = x.to(torch.float64) * emb.cos() + _rotate_half(x.to(torch.float64)) * emb.sin()
    return out.to(x.dtype)


def _results_of(report: Any, status: str) -> list[Any]:
    return [r for r in report.results if r.status == status]


def _diagnoses(report: Any) -> set[str]:
    return {(r.details.get("diagnosis") or {}).get("name") for r in report.failed}


def test_a_rope_function_with_its_own_names_passes_in_its_scope() -> None:
    report = check(my_rope, "rope", names={"base": "theta", "positions": "position_ids"},
                   **FAST)
    assert report.passed, report.text()
    assert report.grade == "exact"
    passed = _results_of(report, "pass")
    assert passed and all(r.provided_by == "backend" for r in passed)
    assert any(r.check.name == "llama_head_dim_128" for r in passed)  # base=500000 -> theta
    reasons = " | ".join(report.unsupported)
    # it takes no layout: fixed at half, the interleaved checks run through the permutation
    assert any(r.check.name == "interleaved_default_positions" and r.details.get("pairing")
               for r in passed)
    assert "converted (" in report.text() and "layout" not in reasons
    assert "it takes no 'scaling'" in reasons and "it takes no 'rotary_dim'" in reasons
    assert 0 < report.in_scope < len(report.results)


def test_declared_unsupported_values_are_out_of_scope() -> None:
    report = check(my_rope, "rope", names={"base": "theta", "positions": "position_ids"},
                   unsupported={"base": 500000.0}, properties=False, **FAST)
    by_name = {r.check.name: r for r in report.results}
    assert by_name["llama_head_dim_128"].status == "unsupported"
    assert "base=500000.0 is declared unsupported" in by_name["llama_head_dim_128"].message


def test_a_planted_layout_bug_is_named() -> None:
    def interleaved_rope(x: Any, position_ids: Any) -> Any:  # pairs (2i, 2i+1), asked half
        emb = _angles(position_ids, x.shape[-1], 10000.0, x)[..., : x.shape[-1] // 2]
        cos, sin = emb.cos().repeat_interleave(2, -1), emb.sin().repeat_interleave(2, -1)
        pairs = x.to(torch.float64).unflatten(-1, (-1, 2))
        turned = torch.stack([-pairs[..., 1], pairs[..., 0]], -1).flatten(-2)
        return (x.to(torch.float64) * cos + turned * sin).to(x.dtype)

    report = check(interleaved_rope, "rope", names={"positions": "position_ids"},
                   properties=False, **FAST)
    assert report.failed and not report.passed
    assert "interleaved_for_half" in _diagnoses(report)


def test_apply_rotary_with_posenc_cos_sin() -> None:
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    for source in ("reference", "posenc"):
        report = check(adapters.apply_rotary(apply_rotary_pos_emb, source=source), **FAST)
        assert report.passed, report.text()
        passed = _results_of(report, "pass")
        assert any("scaling" in r.check.name or r.check.name == "yarn_attention_factor"
                   or r.check.name == "linear_scaling" for r in passed)
        assert all(r.provided_by == "backend" for r in passed)
        assert all(source in r.details["posenc_supplies"] for r in passed)
        assert f"posenc supplies: cos/sin from posenc's {source}" in report.text()
        reasons = " | ".join(report.unsupported)
        assert any(r.check.name == "interleaved_default_positions" for r in passed)
        assert "layout" not in reasons
        assert "partial rotary" in reasons


def test_apply_rotary_planted_sign_bug_fails_and_k_must_match_q() -> None:
    def wrong_sign(q: Any, k: Any, cos: Any, sin: Any) -> Any:  # rotates by -angle
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return q * cos - _rotate_half(q) * sin, k * cos - _rotate_half(k) * sin

    report = check(adapters.apply_rotary(wrong_sign), properties=False, **FAST)
    assert report.failed and report.grade is None

    def k_unrotated(q: Any, k: Any, cos: Any, sin: Any) -> Any:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return q * cos + _rotate_half(q) * sin, k

    report = check(adapters.apply_rotary(k_unrotated), properties=False, **FAST)
    errors = _results_of(report, "error")
    assert errors and all("k_unrotated rotated k differently from q" in r.message
                          for r in errors if r.check.name != "two_dims" or True)


def test_half_width_cos_sin_in_the_interleaved_layout() -> None:
    def apply_interleaved(x: Any, cos: Any, sin: Any) -> Any:  # cos [seq, d/2]
        pairs = x.unflatten(-1, (-1, 2))
        a, b = pairs[..., 0], pairs[..., 1]
        return torch.stack([a * cos - b * sin, b * cos + a * sin], -1).flatten(-2)

    adapter = adapters.apply_rotary(apply_interleaved, layout="interleaved", cos_sin="half",
                                    args=("x", "cos", "sin"), cos_layout="sw")
    report = check(adapter, properties=False, **FAST)
    assert not report.failed, report.text()
    names = {r.check.name for r in _results_of(report, "pass")}
    assert "interleaved_default_positions" in names and "half_default_positions" in names
    converted = {r.check.name for r in report.results if r.details.get("pairing")}
    assert "half_default_positions" in converted
    assert "interleaved_default_positions" not in converted
    assert "batched_left_padding" in names  # [seq, width] tables: one call per batch row


def _default_frequencies(config: Any, device: Any = None, seq_len: Any = None) -> Any:
    params = config.rope_parameters
    dim = int(config.head_dim * params.get("partial_rotary_factor", 1.0))
    return _inv_freq(dim, params["rope_theta"]).to(torch.float32), 1.0


def test_frequency_function_and_its_missing_rope_types() -> None:
    report = check(adapters.frequency_function({"default": _default_frequencies}), **FAST)
    passed = _results_of(report, "pass")
    assert passed and not report.failed, report.text()
    assert {r.check.dtype for r in report.results if r.status != "unsupported"} == {"float32"}
    assert any("no function for rope_type 'yarn'" in reason for reason in report.unsupported)

    def fixed_theta(config: Any, device: Any = None, seq_len: Any = None) -> Any:
        return _inv_freq(config.head_dim, 10000.0).to(torch.float32), 1.0

    report = check(adapters.frequency_function({"default": fixed_theta}), properties=False,
                   **FAST)
    assert report.failed  # rope_theta from the config is ignored


def test_transformers_rope_init_functions_run() -> None:
    pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    report = check(adapters.frequency_function(ROPE_INIT_FUNCTIONS), properties=False, **FAST)
    assert not _results_of(report, "error"), report.text()
    assert len(_results_of(report, "pass")) >= 15


def _cache(length: int, dim: int, base: float = 10000.0) -> Any:
    emb = _angles(torch.arange(length), dim, base, torch.zeros(1))
    return emb.cos(), emb.sin()


def test_cos_sin_cache_builder() -> None:
    report = check(adapters.cos_sin_cache(_cache, max_length=1 << 18), **FAST)
    assert not report.failed, report.text()
    assert _results_of(report, "pass")
    assert any(r.details.get("pairing") for r in _results_of(report, "pass"))
    assert any("is beyond its table (max_length=262144)" in reason
               for reason in report.unsupported)

    def shifted(length: int, dim: int, base: float = 10000.0) -> Any:  # row m holds m + 1
        cos, sin = _cache(length + 1, dim, base)
        return cos[1:], sin[1:]

    report = check(adapters.cos_sin_cache(shifted, max_length=1 << 18), properties=False,
                   **FAST)
    assert report.failed and "positions_plus_one" in _diagnoses(report)


def test_t5_bucket_function() -> None:
    pytest.importorskip("transformers")
    from transformers.models.t5.modeling_t5 import T5Attention

    report = check(T5Attention._relative_position_bucket, "t5_bucket", properties=False,
                   **FAST)
    failing = {r.check.name for r in report.failed}
    assert failing == {"float32_tie_long_range", "bidirectional_tie_long_range"}
    assert _diagnoses(report) == {"float32_log"}

    def flipped(relative_position: Any, bidirectional: bool = True, num_buckets: int = 32,
                max_distance: int = 128) -> Any:
        return T5Attention._relative_position_bucket(
            relative_position, not bidirectional, num_buckets, max_distance)

    report = check(adapters.bucket_function(flipped), properties=False, **FAST)
    assert {"decoder_buckets_for_encoder", "encoder_buckets_for_decoder"} <= _diagnoses(report)


def _slopes(n: int) -> list[float]:
    def power_of_two(k: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(k) - 3)))
        return [start * start**i for i in range(k)]

    if math.log2(n).is_integer():
        return power_of_two(n)
    c = 2 ** math.floor(math.log2(n))
    return power_of_two(c) + _slopes(2 * c)[0::2][: n - c]


def test_alibi_slopes_function() -> None:
    report = check(_slopes, "alibi_slopes", names={"num_heads": "n"}, max_examples=4)
    assert report.passed, report.text()
    assert {r.check.dtype for r in _results_of(report, "pass")} >= {"float64", "float32"}
    assert any("it takes no 'max_bias'" in reason for reason in report.unsupported)

    def geometric(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    report = check(geometric, "alibi_slopes", names={"num_heads": "n"}, max_examples=4)
    assert "geometric_slopes_for_any_heads" in _diagnoses(report)


def test_build_alibi_tensor() -> None:
    pytest.importorskip("transformers")
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    report = check(adapters.alibi_tensor(build_alibi_tensor), **FAST)
    assert report.passed, report.text()
    assert any("not form='causal'" in reason for reason in report.unsupported)

    def negated(attention_mask: Any, num_heads: int, dtype: Any) -> Any:
        return -build_alibi_tensor(attention_mask, num_heads, dtype)

    report = check(adapters.alibi_tensor(negated), properties=False, **FAST)
    assert "bias_sign_flipped" in _diagnoses(report)


# -- bad input ---------------------------------------------------------------------------------
def test_a_mapping_naming_an_unknown_parameter_is_a_parameter_error() -> None:
    with pytest.raises(ParameterError, match="'theta' is not a parameter of rope"):
        adapters.rope_function(my_rope, names={"theta": "base"})
    with pytest.raises(ParameterError, match="my_rope takes no parameter 'rope_theta'"):
        adapters.rope_function(my_rope, names={"base": "rope_theta"})
    with pytest.raises(ParameterError, match="unsupported: 'interleaved' is not a parameter"):
        adapters.rope_function(my_rope, names={"positions": "position_ids"},
                               unsupported={"interleaved": True})
    with pytest.raises(ParameterError, match="takes no 'x'"):
        adapters.rope_function(lambda q, position_ids: q)
    with pytest.raises(ParameterError, match="say which encoding"):
        check(my_rope)
    with pytest.raises(ParameterError, match=r"dtypes: 'float8' is not a dtype posenc checks in "
                                             r"\(known: float64, float32, bfloat16, float16\)"):
        check(my_rope, "rope", dtypes=["float8"])  # was: "0 of 0 checks in scope", no error


def test_a_required_parameter_no_posenc_name_reaches_names_the_mapping_to_make() -> None:
    """Every call would fail on it: refused up front with the posenc name to map (the closest
    one not yet taken), and the mapping it names, made, is accepted."""
    def port(x, pos, theta):
        return x

    with pytest.raises(ParameterError, match=r"port requires 'pos', which is none of rope's names "
                                             r"\(x, positions, base, .*\); map it: "
                                             r"names=\{'positions': 'pos'\}"):
        adapters.rope_function(port)
    with pytest.raises(ParameterError, match=r"requires 'theta'.*map it: names=\{'base': 'theta'\}"):
        adapters.rope_function(port, names={"positions": "pos"})
    adapters.rope_function(port, names={"positions": "pos", "base": "theta"})
    adapters.rope_function(lambda x, pos=None: x)  # not required: a check it leaves out is scope


@pytest.mark.parametrize(("returned", "needle"), [
    (lambda x: x.to(torch.float64), "dtype float64, expected float32"),
    (lambda x: x[..., :2], "shape"),
    (lambda x: x.tolist(), "not an array"),
    (lambda x: x.to("meta"), "device meta, expected cpu"),
])
def test_a_wrong_return_names_the_adapter_and_what_it_returned(returned: Any,
                                                               needle: str) -> None:
    def bad_rope(x: Any, position_ids: Any) -> Any:
        return returned(my_rope(x, position_ids))

    report = check(bad_rope, "rope", names={"positions": "position_ids"}, properties=False,
                   **FAST)
    errors = _results_of(report, "error")
    assert errors and len(errors) == report.in_scope
    for r in errors:
        assert r.message.startswith("AdapterOutputError: bad_rope (rope adapter) returned")
        assert needle in r.message


# -- loading: the CLI, file paths, the current directory ---------------------------------------
_MODULE = '''import torch


def my_rope(x, position_ids, theta=10000.0):
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = position_ids.double()[..., None] * inv
    if position_ids.ndim == 2:
        ang = ang.reshape(ang.shape[0], *([1] * (x.ndim - 3)), *ang.shape[1:])
    emb = torch.cat([ang, ang], -1)
    half = d // 2
    turned = torch.cat([-x[..., half:], x[..., :half]], -1).double()
    return (x.double() * emb.cos() + turned * emb.sin()).to(x.dtype)
'''


def run_cli(*args: str, cwd: Any = None) -> Any:
    """The ``posenc`` command as its console script runs it: -P keeps the current directory
    off sys.path (``python -m`` would put it there)."""
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-P", "-m", "posenc", *args], capture_output=True,
                          text=True, cwd=cwd or os.getcwd(), timeout=600)


@pytest.mark.slow
def test_cli_check_a_function_from_a_file_path_and_from_the_current_directory(tmp_path) -> None:
    (tmp_path / "porter_rope.py").write_text(_MODULE)
    args = ["--map", "base=theta", "--map", "positions=position_ids", "--dtype",
            "float32", "--only", "cases", "--unsupported", "base=500000.0", "--json",
            str(tmp_path / "r.json")]
    proc = run_cli("check", "rope", f"{tmp_path}/porter_rope.py:my_rope", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "grade: exact" in proc.stdout and "converted (" in proc.stdout
    assert "base=500000.0 is declared unsupported" in proc.stdout
    import json

    data = json.loads((tmp_path / "r.json").read_text())
    assert {e["provided_by"] for e in data["results"] if e["status"] == "pass"} == {"backend"}
    proc = run_cli("check", "rope", "porter_rope:my_rope", *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_cli_import_failures_say_how_to_make_the_module_importable(tmp_path) -> None:
    proc = run_cli("check", "rope", "no_such_porter_module:rope", cwd=tmp_path)
    assert proc.returncode == 2
    assert "the module must be importable: give its file path" in proc.stderr
    assert "PYTHONPATH" in proc.stderr and "pip install -e" in proc.stderr
    proc = run_cli("conformance", "--backend", "./missing_adapter.py:BACKEND", cwd=tmp_path)
    assert proc.returncode == 2 and "no file missing_adapter.py" in proc.stderr


@pytest.mark.slow
def test_conformance_backend_from_a_file_path(tmp_path) -> None:
    (tmp_path / "porter_rope.py").write_text(_MODULE)
    (tmp_path / "my_adapter.py").write_text(
        "from posenc.backends import adapters\nfrom porter_rope import my_rope\n"
        "BACKEND = adapters.rope_function(my_rope, names={'positions': 'position_ids', "
        "'base': 'theta'}).backend(name='porter')\n")
    proc = run_cli("conformance", "--backend", "./my_adapter.py:BACKEND", "--encoding", "rope",
                   "--dtype", "float32", "--only", "cases", "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "in scope: " in proc.stdout and "porter" in proc.stdout


# -- selecting checks by parameter values -------------------------------------------------------
def test_selectors_match_declared_parameter_values() -> None:
    from posenc.catalog import specs
    from posenc.conformance.runner import Check
    from posenc.conformance.selection import parse, selects

    all_specs = specs()
    rope = all_specs["rope"]

    def case(name: str, encoding: str = "rope") -> Check:
        return Check("b", "cpu", "float32", "eager", encoding, "case", name)

    def prop(i: int) -> Check:
        return Check("b", "cpu", "float32", "eager", "rope", "property",
                     rope.properties[i].label, i)

    assert selects("rope[layout=interleaved]", case("interleaved_default_positions"), all_specs)
    assert not selects("rope[layout=interleaved]", case("half_default_positions"), all_specs)
    assert selects("rope[layout=half]", case("half_default_positions"), all_specs)  # default
    assert not selects("xpos[layout=interleaved]", case("interleaved_default_positions"),
                       all_specs)
    assert selects("*/float32/*/rope/*[base=500000]", case("llama_head_dim_128"), all_specs)
    assert selects("rope[scaling.rope_type=linear]", case("linear_scaling"), all_specs)  # type
    assert selects("rope[scaling=*]", case("linear_scaling"), all_specs)
    assert not selects("rope[scaling=*]", case("two_dims"), all_specs)
    assert selects("rope[scaling=null,base=10]", case("two_dims"), all_specs)
    interleaved = [i for i, p in enumerate(rope.properties)
                   if p.params.get("layout") == "interleaved"]
    assert interleaved and all(selects("rope[layout=interleaved]", prop(i), all_specs)
                               for i in interleaved)
    assert selects("*", case("two_dims"), all_specs)  # plain globs as before
    assert parse("rope/*[ab]").params == ()  # a character class stays one
    with pytest.raises(ParameterError, match="'layout' is not KEY=VALUE"):
        parse("rope[layout,base=1]")


def test_one_line_marks_one_unsupported_feature(tmp_path) -> None:
    from posenc.conformance import Options, run

    def half_only(x: Any, positions: Any = None, *, layout: str = "half", **kw: Any) -> Any:
        from posenc.backends import torch as pe

        if layout != "half":
            raise RuntimeError("interleaved pairs are not implemented here")
        return pe.rope(x, positions, **kw)

    backend = adapters.rope_function(half_only).backend(name="half-only")
    base = {"backends": [backend], "encodings": ["rope"], "dtypes": ["float32"],
            "modes": ["eager"], "max_examples": 3, "gradients": False}
    results = run(Options(**base, expectations={"rope[layout=interleaved]": "half only"}))
    interleaved = [r for r in results if r.status == "xfail"]
    assert interleaved and all("half only" in r.message for r in interleaved)
    # a property that runs both layouts itself declares none: selected by neither
    assert {r.check.name for r in results if r.failed} == {"rope_layout_permutation"}
    kept = run(Options(**base, skip=["rope[layout=interleaved]"]))
    assert len(kept) == len(results) - len(interleaved)
    assert all(r.status != "xfail" for r in kept)


def test_several_adapters_in_one_backend_keep_their_own_dtypes() -> None:
    from posenc.conformance import Options, run

    def apply(q: Any, k: Any, cos: Any, sin: Any) -> Any:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin

    backend = adapters.as_backend(adapters.apply_rotary(apply),
                                  adapters.frequency_function({"default": _default_frequencies}),
                                  name="pair")
    assert backend.overrides.keys() == {"rope", "rope_frequencies"}
    results = run(Options(backends=[backend], encodings=["rope", "rope_frequencies"],
                          dtypes=["float64", "float32"], modes=["eager"], properties=False,
                          gradients=False))
    assert not [r for r in results if r.failed]
    float64 = [r for r in results if r.check.encoding == "rope_frequencies"
               and r.check.dtype == "float64" and r.status == "unsupported"]
    assert float64 and all("it returns float32 and takes no dtype: float64 is out of its scope"
                           in r.message for r in float64 if "rope_type" not in r.message)
    assert any(r.status == "pass" and r.check.dtype == "float64" and r.check.encoding == "rope"
               for r in results)
    with pytest.raises(ParameterError, match="two adapters for 'rope'"):
        adapters.as_backend(adapters.apply_rotary(apply), adapters.rope_function(my_rope, {
            "positions": "position_ids"}))


def test_transformers_llama_rotary_tables_through_the_cache_adapter() -> None:
    """transformers' LlamaRotaryEmbedding built per call from posenc's parameters: float32
    angles pass conventional, and fail exact only where they explain it."""
    pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    from posenc.backends.rotary_adapters import transformers_config

    def llama_tables(x: Any, position_ids: Any, dim: int, base: float, scaling: Any) -> Any:
        return LlamaRotaryEmbedding(transformers_config(dim, base, scaling))(x, position_ids)

    adapter = adapters.cos_sin_cache(llama_tables, {"positions": "position_ids"},
                                     unsupported={"scaling": [{"rope_type": "ntk", "factor": 8.0},
                                                              {"rope_type": "ntk", "factor": 4.0}]},
                                     batched_positions=True)
    report = check(adapter, precision="conventional", dtypes=["float32"], max_examples=6,
                   gradients=False)
    failing = {r.check.name: r.message for r in report.failed}
    # Llama's default schedule rotates the whole head: partial_rotary_factor in the dict is
    # ignored, which the adapter reports as a table of the wrong width
    assert set(failing) == {"partial_rotary_factor_in_dict"}, report.text()
    assert "returned cos of shape [1, 5, 20]: expected 5 rows of width 8" in \
        failing["partial_rotary_factor_in_dict"]
    graded = [r for r in report.results if r.status == "pass"]
    assert any(r.grade == "conventional" for r in graded)
    assert "decode_one_token" in {r.check.name for r in graded if r.grade == "conventional"}
    # near 2^17 the conventional profile judges each element on its own bound (a case-wide
    # allowance reached 0.39 of the values there and judged nothing)
    near = next(r for r in report.results if r.check.name == "near_2_17")
    assert near.status == "pass" and near.grade == "conventional", near.message
    assert near.details["elements"]["judged"] >= near.details["elements"]["needed"]
