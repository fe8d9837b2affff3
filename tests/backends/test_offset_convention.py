"""Positions given as an integer offset, and xPos centres, are conventions the harness converts
(issue 45, parts 1 and 2): outside-style functions written here in NumPy float64 keep their
checks, and mutants are still caught by name."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from posenc import ParameterError, Unsupported
from posenc.backends import adapters
from posenc.conformance import check

F64 = {"dtypes": ["float64"], "max_examples": 3, "gradients": False}


def _rotate(x: np.ndarray, positions: np.ndarray, base: float, pairs: str) -> np.ndarray:
    dim = x.shape[-1]
    inv = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    angle = positions[:, None].astype(np.float64) * inv
    cos, sin = np.cos(angle), np.sin(angle)
    if pairs == "half":
        a, b = x[..., : dim // 2], x[..., dim // 2:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
    return out


def offset_rope(x: Any, offset: int = 0, base: float = 10000.0) -> np.ndarray:
    """rotary-embedding-torch / Meta llama style: positions offset + arange(seq); computed in
    float64, returned in x's dtype."""
    x = np.asarray(x)
    return _rotate(x.astype(np.float64), offset + np.arange(x.shape[-2]), base,
                   "half").astype(x.dtype)


def off_by_one_rope(x: Any, offset: int = 0, base: float = 10000.0) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return _rotate(x, offset + 1 + np.arange(x.shape[-2]), base, "half")


def torchscale_xpos(x: Any, offset: int = 0, kind: str = "query",
                    scale_base: float = 512.0, base: float = 10000.0) -> np.ndarray:
    """torchscale XPOS: scales centred at (seq + offset + 1) // 2, keys downscaled; computed in
    float64, returned in x's dtype."""
    dtype = np.asarray(x).dtype
    x = np.asarray(x, np.float64)
    seq, dim = x.shape[-2], x.shape[-1]
    positions = offset + np.arange(seq)
    zeta = (np.arange(0, dim, 2) / dim + 0.4) / 1.4
    sign = 1.0 if kind == "query" else -1.0
    power = sign * (positions - (seq + offset + 1) // 2)[:, None] / scale_base
    return (_rotate(x, positions, base, "interleaved")
            * np.repeat(zeta ** power, 2, axis=-1)).astype(dtype)


def both_scaled_up_xpos(x: Any, offset: int = 0, kind: str = "query",
                        scale_base: float = 512.0, base: float = 10000.0) -> np.ndarray:
    """The q scale applied to keys too: a centre convention that does change logits."""
    return torchscale_xpos(x, offset, "query", scale_base, base)


def _bad(report: Any) -> list[Any]:
    return [r for r in report.results if r.status in ("fail", "error")]


_PER_RUN = {"rope_relative_invariance", "rope_composition", "rope_identity_at_zero",
            "rope_batched_positions"}


def _not_taken(report: Any) -> list[Any]:
    """Checks out of scope for another reason than a parameter the function does not take."""
    return [r for r in report.results if r.status not in ("pass", "fail", "error")
            and "it takes no" not in str(r.message)]


def test_an_offset_only_rope_passes_with_its_convention_named() -> None:
    adapter = adapters.function("rope", offset_rope, framework="numpy", offset="offset",
                                negative_offset=True)
    report = check(adapter, "rope", **F64)
    assert not _bad(report), report.text()
    passed = [r for r in report.results if r.status == "pass"]
    # 19 of 57 (was 11): every check it can express; the rest take scaling/rotary_dim/seq_len
    assert len(passed) >= 19 and not _not_taken(report), report.text()
    assert {r.check.name for r in passed} >= {"rope_norm_preserving", "rope_layout_permutation",
                                              *_PER_RUN}
    assert "offset 'offset'" in report.text() and "one call per contiguous run" in report.text()


def test_positions_no_offset_expresses_reach_it_one_run_at_a_time() -> None:
    """Shuffled, repeated and per-row positions through the conversion equal the float64
    formula at those positions, computed here independently of the wrapper."""
    adapter = adapters.function("rope", offset_rope, framework="numpy", offset="offset",
                                negative_offset=True)
    x = np.random.default_rng(0).standard_normal((3, 2, 5, 8))
    for positions in (np.array([4, 0, 0, 9, -2]), np.array([[4, 0, 0, 9, -2]]),
                      np.array([[0, 1, 2, 3, 4], [7, 8, 2, 3, 4], [0, 0, 0, 0, 0]])):
        got = adapter.call(x=x, positions=positions)
        rows = np.broadcast_to(positions, (3, 5))  # [seq] and [1, seq]: every row
        want = np.stack([_rotate(x[b], rows[b], 10000.0, "half") for b in range(3)])
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)


def test_an_offset_that_may_not_be_negative_is_never_given_one() -> None:
    adapter = adapters.function("rope", offset_rope, framework="numpy", offset="offset")
    with pytest.raises(Unsupported, match=r"negative start \(-2\)"):
        adapter.call(x=np.zeros((1, 3, 4)), positions=np.array([3, -2, 0]))
    with pytest.raises(Unsupported, match=r"600 contiguous runs, more calls than the 512"):
        adapter.call(x=np.zeros((1, 600, 4)), positions=np.arange(600)[::-1].copy())


def test_a_per_token_bug_is_caught_through_the_runs() -> None:
    """A rope whose single-token calls ignore the offset (a decode path that forgot it) fails
    where tokens are called one at a time, and is named: its output freezes at position 0."""
    def single_token_at_zero(x: Any, offset: int = 0, base: float = 10000.0) -> np.ndarray:
        return offset_rope(x, 0 if np.shape(x)[-2] == 1 else offset, base)

    adapter = adapters.function("rope", single_token_at_zero, framework="numpy", offset="offset",
                                negative_offset=True)
    report = check(adapter, "rope", cases=False, **F64)
    named = {r.check.name: (r.details.get("diagnosis") or {}).get("name") for r in report.failed}
    assert named.get("rope_decode_offset") == "cache_clamped", report.text()
    assert "rope_phase_precision" in named, report.text()


def test_an_off_by_one_offset_is_caught_and_named() -> None:
    adapter = adapters.function("rope", off_by_one_rope, framework="numpy", offset="offset")
    report = check(adapter, "rope", properties=False, **F64)
    assert report.failed, report.text()
    named = {(r.details.get("diagnosis") or {}).get("name") for r in report.failed}
    assert "positions_plus_one" in named, report.text()


def test_a_torchscale_centre_is_converted() -> None:
    adapter = adapters.function("xpos", torchscale_xpos, framework="numpy", offset="offset",
                                centre="torchscale")
    report = check(adapter, "xpos", **F64)
    assert not _bad(report), report.text()
    # 21 of 30 (was 15): out of scope only rotary_dim (not taken), a negative start (not
    # declared legal), factors past float64's range, and bit-identity at 0 through a rescaling
    passed = {r.check.name for r in report.results if r.status == "pass"}
    assert len(passed) >= 19 and {"xpos_relative_invariance", "rope_batched_positions"} <= passed
    reasons = {str(r.message).split(":")[0] for r in _not_taken(report)}
    assert reasons <= {"torchscale_xpos takes positions as an offset (p0 + arange(seq))",
                       "torchscale_xpos's xPos centre convention",
                       "its declared xPos centre is converted by a rescaling that rounds"}, reasons
    assert "xPos centre (torchscale) converted" in report.text()


def test_the_torchscale_function_is_torchscale_in_float64() -> None:
    """The test's torchscale_xpos against the spec's formula, written out here: queries at
    n = offset + t scaled by zeta ** ((n - c_t) / scale_base), c_t = (seq + offset + 1) // 2."""
    x = np.random.default_rng(1).standard_normal((2, 6, 8))
    zeta = (np.arange(0, 8, 2) / 8 + 0.4) / 1.4
    for kind, sign in (("query", 1), ("key", -1)):
        n = 9 + np.arange(6)
        scale = zeta[None, :] ** (sign * (n - (6 + 9 + 1) // 2)[:, None] / 512.0)
        want = _rotate(x, n, 10000.0, "interleaved") * np.repeat(scale, 2, axis=-1)
        np.testing.assert_allclose(torchscale_xpos(x, 9, kind), want, rtol=1e-15, atol=0)


def test_a_centre_that_changes_logits_still_fails() -> None:
    adapter = adapters.function("xpos", both_scaled_up_xpos, framework="numpy", offset="offset",
                                centre="torchscale")
    report = check(adapter, "xpos", **F64)
    assert report.failed, report.text()


def test_an_array_mapped_onto_an_integer_offset_is_a_declaration_error() -> None:
    with pytest.raises(ParameterError, match=r"offset='offset'.*--offset offset"):
        adapters.function("rope", offset_rope, {"positions": "offset"}, framework="numpy")


def test_a_centre_without_an_offset_is_refused() -> None:
    with pytest.raises(ParameterError, match="centre"):
        adapters.function("xpos", torchscale_xpos, framework="numpy", centre="torchscale")


def test_the_centre_mutant_is_caught_where_logits_change() -> None:
    adapter = adapters.function("xpos", both_scaled_up_xpos, framework="numpy", offset="offset",
                                centre="torchscale")
    report = check(adapter, "xpos", **F64)
    keys = [r for r in report.failed if "key" in r.check.name]
    assert keys, report.text()
    assert any(r.check.name.startswith("xpos_key_query_inverse") for r in report.failed)
    assert not [r for r in report.failed if r.check.name == "query_default"], report.text()
    # named where its own centre is posenc's (through the conversion elsewhere it is a
    # different function: query scale about c_t, rescaled as a key's)
    named = {r.check.name: (r.details.get("diagnosis") or {}).get("name") for r in report.failed}
    assert named["torchscale_keys"] == named["rotary_embedding_torch_key"] == \
        "query_scale_on_keys", named


def keys_scaled_up(x: Any, positions: Any = None, kind: str = "query",
                   scale_base: float = 512.0, centre: float = 0.0,
                   base: float = 10000.0) -> np.ndarray:
    """xPos with positions and a centre, whose keys get the query's scale (kind ignored)."""
    x = np.asarray(x, np.float64)
    positions = np.arange(x.shape[-2]) if positions is None else np.asarray(positions)
    dim = x.shape[-1]
    zeta = (np.arange(0, dim, 2) / dim + 0.4) / 1.4
    angle = positions[..., None] * base ** (-np.arange(0, dim, 2) / dim)
    scale = zeta ** ((positions[..., None] - centre) / scale_base)
    if positions.ndim == 2 and x.ndim == 4:  # positions [batch, seq] over x [batch, h, seq, d]
        angle, scale = angle[:, None], scale[:, None]
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = (a * np.cos(angle) - b * np.sin(angle)) * scale
    out[..., 1::2] = (a * np.sin(angle) + b * np.cos(angle)) * scale
    return out


def test_the_query_scale_on_keys_is_named_on_every_failure() -> None:
    """Its keys equal the spec's queries (the diagnosis), checked here in float64 first."""
    x = np.random.default_rng(2).standard_normal((2, 5, 8))
    n = np.arange(3, 8)
    zeta = (np.arange(0, 8, 2) / 8 + 0.4) / 1.4
    down = _rotate(x, n, 10000.0, "interleaved") * np.repeat(
        zeta[None, :] ** (-(n - 1.5)[:, None] / 64.0), 2, axis=-1)
    got = keys_scaled_up(x, n, "key", 64.0, 1.5)
    assert np.abs(got - down).max() > 1e-2  # a visible bug, not rounding
    up = _rotate(x, n, 10000.0, "interleaved") * np.repeat(
        zeta[None, :] ** ((n - 1.5)[:, None] / 64.0), 2, axis=-1)
    np.testing.assert_allclose(got, up, rtol=1e-14, atol=0)
    report = check(keys_scaled_up, "xpos", framework="numpy", unsupported={"layout": "half"},
                   **F64)
    names = {r.check.name: (r.details.get("diagnosis") or {}).get("name") for r in report.failed}
    assert {"key_default", "xpos_key_query_inverse", "xpos_relative_invariance"} <= set(names)
    assert set(names.values()) == {"query_scale_on_keys"}, names
    assert not [r for r in report.failed if "query" in r.check.name and "key" not in
                r.check.name], report.text()


def test_a_correct_xpos_is_never_named_query_scale_on_keys() -> None:
    adapter = adapters.function("xpos", torchscale_xpos, framework="numpy", offset="offset",
                                centre="torchscale")
    report = check(adapter, "xpos", **F64)
    assert not [r for r in report.results if r.details.get("diagnosis")], report.text()


def test_the_cli_declares_the_offset_convention(tmp_path: Any, capsys: Any,
                                                monkeypatch: Any) -> None:
    from posenc.cli import main

    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).parent))
    code = main(["check", "rope", "test_offset_convention:offset_rope", "--offset", "offset",
                 "--framework", "numpy", "--dtype", "float64", "--max-examples", "2"])
    out = capsys.readouterr().out
    assert "positions converted to offset 'offset'" in out, out
    assert " 0 failed" in out and code == 0, out


@pytest.mark.oracle
def test_rotary_embedding_torch_with_its_offset() -> None:
    """The real library: rotate_queries_or_keys(t, offset=...), interleaved pairing. Its angles
    are float32 (inv_freq buffer), so it is checked in float32 under the conventional profile."""
    torch = pytest.importorskip("torch")
    ret = pytest.importorskip("rotary_embedding_torch")

    def ret_rope(x: Any, offset: int = 0) -> Any:
        rot = ret.RotaryEmbedding(x.shape[-1], cache_if_possible=False)
        return rot.rotate_queries_or_keys(x, offset=offset)

    adapter = adapters.function("rope", ret_rope, framework="torch", offset="offset",
                                layout="interleaved", negative_offset=True)
    report = check(adapter, "rope", dtypes=["float32"], max_examples=3, gradients=False,
                   precision="conventional")
    assert torch is not None and not _bad(report), report.text()
    assert len([r for r in report.results if r.status == "pass"]) >= 6, report.text()


def test_only_contiguous_positions_reach_an_offset_and_the_rest_say_why() -> None:
    from posenc import Unsupported
    from posenc.backends.offset_convention import start_of

    assert start_of(np.array([[5, 6, 7], [5, 6, 7]]), 3, negative=False, label="f") == 5
    assert start_of(None, 3, negative=False, label="f") == 0
    assert start_of(np.array([-2, -1, 0]), 3, negative=True, label="f") == -2
    for positions, reason in ((np.array([[0, 1, 2], [1, 2, 3]]), "ragged or padded"),
                              (np.array([0, 2, 1]), "non-contiguous"),
                              (np.array([-2, -1, 0]), "negative start")):
        with pytest.raises(Unsupported, match=f"f takes positions as an offset.*{reason}"):
            start_of(positions, 3, negative=False, label="f")


def test_the_cli_refuses_an_offset_on_another_adapter(capsys: Any) -> None:
    from posenc.cli import main

    code = main(["check", "rope", "test_offset_convention:offset_rope", "--adapter", "apply",
                 "--offset", "offset"])
    captured = capsys.readouterr()
    assert code != 0 and "position conventions (--adapter function)" in captured.err + captured.out


@pytest.mark.oracle
def test_rotary_embedding_torch_xpos_with_its_centre() -> None:
    """rotate_queries_and_keys: positions arange(seq), scale centred at seq // 2 (float32)."""
    pytest.importorskip("torch")
    ret = pytest.importorskip("rotary_embedding_torch")

    def ret_xpos(x: Any, offset: int = 0, kind: str = "query", scale_base: float = 512.0) -> Any:
        if offset != 0:
            raise NotImplementedError("rotate_queries_and_keys rotates arange(seq) only")
        rot = ret.RotaryEmbedding(x.shape[-1], use_xpos=True, xpos_scale_base=scale_base,
                                  cache_if_possible=False)
        q, k = rot.rotate_queries_and_keys(x, x)
        return q if kind == "query" else k

    adapter = adapters.function("xpos", ret_xpos, framework="torch", offset="offset",
                                centre="rotary-embedding-torch")
    report = check(adapter, "xpos", dtypes=["float32"], max_examples=3, gradients=False,
                   precision="conventional")
    assert not _bad(report), report.text()
    assert len([r for r in report.results if r.status == "pass"]) >= 7, report.text()
    assert "xPos centre (rotary-embedding-torch) converted" in report.text()


def test_declared_conversions_attach_when_built_and_compile_whole() -> None:
    """One mechanism (adapter_base.declare) attaches what an adapter declares, when it is
    built: the user's function is never touched, and a call traces under
    torch.compile(fullgraph=True), which refuses a setattr during the call (issue 45)."""
    torch = pytest.importorskip("torch")
    def torch_rope(x: Any, positions: Any, base: float = 10000.0) -> Any:
        dim = x.shape[-1]
        angle = positions[..., None].to(torch.float64) * base ** (
            -torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        a, b = x[..., : dim // 2], x[..., dim // 2:]
        return torch.cat([a * angle.cos() - b * angle.sin(),
                          a * angle.sin() + b * angle.cos()], -1).to(x.dtype)

    before = dict(vars(torch_rope))
    adapter = adapters.function("rope", torch_rope, framework="torch", layout="half")
    x, positions = torch.randn(2, 5, 8, dtype=torch.float64), torch.arange(3, 8)
    want = _rotate(x.numpy(), positions.numpy(), 10000.0, "half")
    adapter.call(x=x, positions=positions)  # eager first, as the harness (loads torch's native)
    compiled = torch.compile(adapter.call, fullgraph=True)
    np.testing.assert_allclose(compiled(x=x, positions=positions).numpy(), want, atol=1e-14)
    assert vars(torch_rope) == before
    offset = adapters.function("rope", offset_rope, framework="numpy", offset="offset")
    assert "offset 'offset'" in offset.call.posenc_conventions
    assert not hasattr(offset_rope, "posenc_conventions") and not vars(offset_rope)


def off_by_one_torchscale_xpos(x: Any, offset: int = 0, kind: str = "query",
                               scale_base: float = 512.0, base: float = 10000.0) -> np.ndarray:
    """torchscale's XPOS rotating and scaling positions offset + 1 + arange(seq) (its centre
    from the true offset)."""
    x = np.asarray(x, np.float64)
    seq, dim = x.shape[-2], x.shape[-1]
    positions = offset + 1 + np.arange(seq)
    zeta = (np.arange(0, dim, 2) / dim + 0.4) / 1.4
    sign = 1.0 if kind == "query" else -1.0
    power = sign * (positions - (seq + offset + 1) // 2)[:, None] / scale_base
    return _rotate(x, positions, base, "interleaved") * np.repeat(zeta ** power, 2, axis=-1)


@pytest.mark.parametrize(("encoding", "fn", "declared", "named"), [
    ("rope", off_by_one_rope, {}, "positions_plus_one"),
    ("rope", offset_rope, {"layout": "interleaved"}, "half_for_interleaved"),
    ("xpos", off_by_one_torchscale_xpos, {"centre": "torchscale"}, "positions_plus_one"),
    ("xpos", torchscale_xpos, {"centre": "torchscale", "layout": "half"}, "interleaved_for_half"),
], ids=["rope-off-by-one", "rope-layout", "xpos-off-by-one", "xpos-layout"])
def test_mutants_through_the_runs_are_caught_and_named(encoding: str, fn: Any,
                                                      declared: dict[str, Any], named: str) -> None:
    """Properties included (so through the per-run calls): every failure is named."""
    adapter = adapters.function(encoding, fn, framework="numpy", offset="offset",
                                negative_offset=encoding == "rope", **declared)
    report = check(adapter, encoding, **F64)
    names = {r.check.name: (r.details.get("diagnosis") or {}).get("name") for r in report.failed}
    assert len(names) >= 9 and set(names.values()) == {named}, report.text()
    assert any(r.check.kind == "property" for r in report.failed), report.text()


@pytest.mark.parametrize(("encoding", "fn", "declared", "in_scope"), [
    ("rope", offset_rope, {"negative_offset": True}, 19),
    ("xpos", torchscale_xpos, {"centre": "torchscale"}, 20),
], ids=["rope", "xpos"])
def test_the_offset_functions_keep_their_checks_in_float32(encoding: str, fn: Any,
                                                          declared: dict[str, Any],
                                                          in_scope: int) -> None:
    """Computed in float64 and returned in float32: the same checks run (docs/conventions.md's
    table), with 0 fail and 0 error under the exact profile."""
    adapter = adapters.function(encoding, fn, framework="numpy", offset="offset", **declared)
    report = check(adapter, encoding, dtypes=["float32"], max_examples=3, gradients=False)
    assert not _bad(report), report.text()
    assert len([r for r in report.results if r.status == "pass"]) >= in_scope, report.text()
