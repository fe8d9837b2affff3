"""``pe.RotaryEmbedding``'s CPU rotation as one Inductor loop (backends/torch/inductor_rotation.py).

In place, ``out=`` and new tensors, float32 and bfloat16, both layouts, GQA and an odd length,
against a float64 rotation written here from the RoPE formula (``rotated64`` of the tiles'
tests). The calls that must not take this path (a partial rotary_dim, strided inputs, a row of
positions per batch, autograd) still match it, and so does a call after the compiler fails.
A kernel with a wrong sign fails the same check. One compilation serves every length, and the
caller's tensors are not marked for dynamo. Timings are in benchmarks/README.md, not here.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from posenc.backends import torch as pe  # noqa: E402
from posenc.backends.torch import inductor_rotation  # noqa: E402
from tests.backends.test_rotary_tiles import (  # noqa: E402
    BASE,
    TOLERANCE,
    call_paths,
    relative_error,
    rotated64,
)


@pytest.fixture
def small_calls(monkeypatch):
    """Small inputs take the compiled path (it starts at 2^20 elements; new tensors are
    filled by it from 2^16), in place in blocks of 3 heads of 37 positions (the last block
    partial); a counter of compiled calls."""
    from posenc.backends.torch import rotary_embedding
    monkeypatch.setattr(inductor_rotation, "MIN_ELEMENTS", 1)
    monkeypatch.setattr(rotary_embedding, "_FILL_FROM", 1)
    monkeypatch.setattr(inductor_rotation, "INPLACE_TILE_BYTES", 3 * 37 * 64 * 4)
    monkeypatch.setattr(inductor_rotation, "_broken", [])
    monkeypatch.setattr(inductor_rotation, "_spent", set())
    calls = []
    real = inductor_rotation.rotate_compiled

    def counted(*args):
        done = real(*args)
        calls.append(done)
        return done

    monkeypatch.setattr(rotary_embedding, "rotate_compiled", counted)
    return calls


def _check(rot, q, k, positions, dtype=torch.float32, layout="half"):
    want_q, want_k = (rotated64(t, positions, layout=layout) for t in (q, k))
    with torch.no_grad():
        for name, got_q, got_k in call_paths(rot, q, k, torch.as_tensor(positions)):
            assert got_q.dtype == dtype and got_k.dtype == dtype, name
            assert relative_error(got_q, want_q) < TOLERANCE[dtype], (name, relative_error(got_q, want_q))
            assert relative_error(got_k, want_k) < TOLERANCE[dtype], (name, relative_error(got_k, want_k))


@pytest.mark.parametrize(("dtype", "layout"), [(torch.float32, "half"),
                                               (torch.bfloat16, "half"),
                                               (torch.float32, "interleaved")], ids=str)
def test_every_path_matches_float64(small_calls, dtype, layout) -> None:
    # GQA (8 query heads, 2 key heads), an odd length, positions past the first rows
    q, k = torch.randn(1, 8, 37, 64).to(dtype), torch.randn(1, 2, 37, 64).to(dtype)
    positions = np.array([0, 1, 4096, 70000, *range(5, 38)])
    rot = pe.RotaryEmbedding(64, base=BASE, layout=layout, max_positions=70001)
    _check(rot, q, k, positions, dtype, layout)
    assert small_calls and all(small_calls)  # every call ran the compiled loop


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_in_place_in_row_ranges_where_a_head_is_larger_than_a_block(small_calls, monkeypatch,
                                                                    dtype) -> None:
    """Blocks of 16 rows of 64 float32 features: each head rotates in place in ranges of
    rows (16, 16, 5, each contiguous, with its own rows of cos and sin)."""
    monkeypatch.setattr(inductor_rotation, "INPLACE_TILE_BYTES", 16 * 64 * 4)
    flat = torch.zeros(3, 37, 64)
    blocks = list(inductor_rotation._in_place_blocks(flat, torch.zeros(37, 64), torch.zeros(37, 64)))
    assert [(tuple(b.shape), tuple(c.shape)) for b, c, _ in blocks] == 3 * [
        ((1, 16, 64), (16, 64)), ((1, 16, 64), (16, 64)), ((1, 5, 64), (5, 64))]
    assert all(b.is_contiguous() for b, _, _ in blocks)
    rows = 16 * 4 // dtype.itemsize
    q, k = torch.randn(1, 8, 37, 64).to(dtype), torch.randn(1, 2, 37, 64).to(dtype)
    assert rows < 37  # every head in ranges of rows
    positions = np.array([0, 1, 4096, 70000, *range(5, 38)])
    _check(pe.RotaryEmbedding(64, base=BASE, max_positions=70001), q, k, positions, dtype)
    assert small_calls and all(small_calls)


def test_exact_phases_without_a_table(small_calls) -> None:
    q, k = torch.randn(2, 4, 37, 64), torch.randn(2, 1, 37, 64)
    positions = np.arange(1000, 1037)
    _check(pe.RotaryEmbedding(64, base=BASE), q, k, positions)
    assert small_calls and all(small_calls)


def test_one_compilation_serves_every_length(small_calls) -> None:
    torch._dynamo.reset()
    from torch._dynamo.utils import counters
    counters.clear()
    rot = pe.RotaryEmbedding(64, base=BASE, max_positions=4096)
    for seq in (37, 101, 256):
        q, k = torch.randn(1, 8, seq, 64), torch.randn(1, 2, seq, 64)
        _check(rot, q, k, np.arange(seq))
        assert not hasattr(q, "_dynamo_dynamic_indices")  # the caller's tensors unmarked
    # out= and in place (whole-head blocks, and a last block of 1 head or 2): a few graphs,
    # none for a new length
    assert counters["stats"]["unique_graphs"] <= 6, dict(counters["stats"])


@pytest.mark.parametrize("case", ["rotary_dim", "strided", "batch_positions", "autograd"])
def test_other_calls_keep_the_tiles_and_match(small_calls, case) -> None:
    q, k = torch.randn(2, 8, 37, 64), torch.randn(2, 2, 37, 64)
    positions = np.arange(37)
    rot = pe.RotaryEmbedding(64, base=BASE, max_positions=4096)
    if case == "rotary_dim":
        rot = pe.RotaryEmbedding(64, base=BASE, rotary_dim=48, max_positions=4096)
        want = rotated64(q, positions, rotary_dim=48)
        assert relative_error(rot(q, torch.as_tensor(positions)), want) < 4e-6
    elif case == "strided":  # [b, s, h, d] storage seen as [b, h, s, d]
        qs, ks = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k))
        _check(rot, qs, ks, positions)
    elif case == "batch_positions":
        rows = np.stack([positions, positions + 500])
        _check(rot, q, k, rows)
    else:
        qg = q.clone().requires_grad_()
        got = rot(qg, torch.as_tensor(positions))
        got.sum().backward()
        assert relative_error(got.detach(), rotated64(q, positions)) < 4e-6 and qg.grad is not None
    assert not any(small_calls)


def test_a_compile_error_falls_back_to_the_tiles(small_calls, monkeypatch) -> None:
    def broken(*key):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(inductor_rotation, "_kernel", broken)
    q, k = torch.randn(1, 8, 37, 64), torch.randn(1, 2, 37, 64)
    _check(pe.RotaryEmbedding(64, base=BASE, max_positions=64), q, k, np.arange(37))
    assert small_calls and not any(small_calls)
    assert not inductor_rotation.available()  # remembered: no second attempt


def test_a_kernel_past_its_recompile_limit_leaves_the_others(small_calls, monkeypatch) -> None:
    def spent(*key):
        def kernel(*args):
            raise torch._dynamo.exc.FailOnRecompileLimitHit("recompile limit")
        return kernel

    monkeypatch.setattr(inductor_rotation, "_kernel", spent)
    q, k = torch.randn(1, 8, 37, 64), torch.randn(1, 2, 37, 64)
    _check(pe.RotaryEmbedding(64, base=BASE, max_positions=64), q, k, np.arange(37))
    assert small_calls and not any(small_calls)
    assert inductor_rotation.available()  # only those kinds of call take the tiles
    assert (True, torch.float32, "half", 64) in inductor_rotation._spent


def test_a_wrong_sign_fails_the_check(small_calls, monkeypatch) -> None:
    real = inductor_rotation._rotated
    monkeypatch.setattr(inductor_rotation, "_rotated",
                        lambda x, cos, sin, layout: real(x, cos, -sin, layout))
    torch._dynamo.reset()  # the kernels are traced again, with the wrong sign
    q, k = torch.randn(1, 8, 37, 64), torch.randn(1, 2, 37, 64)
    positions = np.arange(37)
    rot = pe.RotaryEmbedding(64, base=BASE, max_positions=64)
    try:
        with torch.no_grad():
            for name, got_q, _ in call_paths(rot, q, k, torch.as_tensor(positions)):
                assert relative_error(got_q, rotated64(q, positions)) > 1e-2, name
    finally:
        torch._dynamo.reset()  # no later test may meet the wrong kernel


def test_inference_mode_and_fresh_results_are_plain_tensors(small_calls) -> None:
    q, k = torch.randn(1, 8, 37, 64), torch.randn(1, 2, 37, 64)
    rot = pe.RotaryEmbedding(64, base=BASE, max_positions=64)
    with torch.inference_mode():
        got_q, got_k = rot(q, torch.arange(37), k=k)
    assert relative_error(got_q, rotated64(q, np.arange(37))) < 4e-6
    assert got_q.is_contiguous() and got_k.shape == k.shape


@pytest.mark.parametrize("form", ["yarn", "longrope", "llama3", "ntk_alpha", "partial"])
@pytest.mark.parametrize("seq", [15, 37])  # LongRoPE: short factors, then long (37 > 20)
def test_schedules_through_the_loop_match_float64_rope(small_calls, form, seq) -> None:
    """Every schedule's table (attention factor, LongRoPE's switch, interleaved pairs) reaches
    the compiled loop as it reaches the tiles: the module matches ``posenc.rope`` run in
    float64."""
    import posenc
    from tests.backends.test_rotary_embedding_schedules import SCHEDULES

    scaling, kwargs = SCHEDULES[form]
    config = {**kwargs, "scaling": scaling or None}
    q, k = torch.randn(1, 8, seq, 16), torch.randn(1, 2, seq, 16)
    positions = torch.arange(seq)
    want = [posenc.rope(t.double(), positions, **config) for t in (q, k)]
    for max_positions in (64, None):
        rot = pe.RotaryEmbedding(16, **config, max_positions=max_positions)
        with torch.no_grad():
            got = rot(q, positions, k=k)
        for g, w in zip(got, want, strict=True):
            assert float((g.double() - w).abs().max() / w.abs().max()) < 4e-6, max_positions
    assert any(small_calls) == (form != "partial")  # a partial rotary_dim keeps the tiles
