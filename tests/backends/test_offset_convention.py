"""Positions given as an integer offset, and xPos centres, are conventions the harness converts
(issue 45, parts 1 and 2): outside-style functions written here in NumPy float64 keep their
checks, and mutants are still caught by name."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from posenc import ParameterError
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
    """rotary-embedding-torch / Meta llama style: positions offset + arange(seq)."""
    x = np.asarray(x, np.float64)
    return _rotate(x, offset + np.arange(x.shape[-2]), base, "half")


def off_by_one_rope(x: Any, offset: int = 0, base: float = 10000.0) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return _rotate(x, offset + 1 + np.arange(x.shape[-2]), base, "half")


def torchscale_xpos(x: Any, offset: int = 0, kind: str = "query",
                    scale_base: float = 512.0, base: float = 10000.0) -> np.ndarray:
    """torchscale XPOS: scales centred at (seq + offset + 1) // 2, keys downscaled."""
    x = np.asarray(x, np.float64)
    seq, dim = x.shape[-2], x.shape[-1]
    positions = offset + np.arange(seq)
    zeta = (np.arange(0, dim, 2) / dim + 0.4) / 1.4
    sign = 1.0 if kind == "query" else -1.0
    power = sign * (positions - (seq + offset + 1) // 2)[:, None] / scale_base
    return _rotate(x, positions, base, "interleaved") * np.repeat(zeta ** power, 2, axis=-1)


def both_scaled_up_xpos(x: Any, offset: int = 0, kind: str = "query",
                        scale_base: float = 512.0, base: float = 10000.0) -> np.ndarray:
    """The q scale applied to keys too: a centre convention that does change logits."""
    return torchscale_xpos(x, offset, "query", scale_base, base)


def _bad(report: Any) -> list[Any]:
    return [r for r in report.results if r.status in ("fail", "error")]


def test_an_offset_only_rope_passes_with_its_convention_named() -> None:
    adapter = adapters.function("rope", offset_rope, framework="numpy", offset="offset",
                                negative_offset=True)
    report = check(adapter, "rope", **F64)
    assert not _bad(report), report.text()
    passed = [r for r in report.results if r.status == "pass"]
    # 11 of 56: the rest take scaling/rotary_dim/seq_len this function lacks, or positions no
    # offset expresses (left padding, different rows, R_b(R_a x), concatenated shifts)
    assert len(passed) >= 11, report.text()
    assert {r.check.name for r in passed} >= {"rope_norm_preserving", "rope_layout_permutation"}
    assert "offset 'offset'" in report.text()
    skipped = [r for r in report.results if r.status not in ("pass", "fail", "error")]
    assert any("as an offset" in str(r.message) for r in skipped), report.text()


def test_an_off_by_one_offset_is_caught_and_named() -> None:
    adapter = adapters.function("rope", off_by_one_rope, framework="numpy", offset="offset")
    report = check(adapter, "rope", properties=False, **F64)
    assert report.failed, report.text()
    named = {r.details.get("diagnosis", {}).get("name") for r in report.failed}
    assert "positions_plus_one" in named, report.text()


def test_a_torchscale_centre_is_converted() -> None:
    adapter = adapters.function("xpos", torchscale_xpos, framework="numpy", offset="offset",
                                centre="torchscale")
    report = check(adapter, "xpos", **F64)
    assert not _bad(report), report.text()
    # 15 of 30 here: properties draw contiguous non-negative runs for an offset function
    assert len([r for r in report.results if r.status == "pass"]) >= 15, report.text()
    assert "xPos centre (torchscale) converted" in report.text()


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
