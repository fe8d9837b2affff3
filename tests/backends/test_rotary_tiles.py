"""``pe.RotaryEmbedding``'s CPU rotation in cache-sized tiles (backends/torch/tiled.py).

Every path (in place, ``out=``, new tensors) in float32 and bfloat16, in one tile and in many
(with a last partial tile), against a float64 rotation written here from the RoPE formula. A
tiling that misplaces its tables' rows must fail the same check. Bad input raises a
ParameterError naming the parameter, and the number of ops does not grow with the positions
inside a tile (no Python loop over positions). Timings are in benchmarks/README.md, not here.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from posenc.backends import torch as pe  # noqa: E402
from posenc.backends.torch import tiled  # noqa: E402
from posenc.errors import ParameterError  # noqa: E402

BASE = 500000.0


def rotated64(x: torch.Tensor, positions: np.ndarray, *, rotary_dim: int | None = None,
              layout: str = "half") -> np.ndarray:
    """RoPE in float64 from its definition: pair j of the rotated features turns by
    ``p * BASE ** (-2j / rotary_dim)``."""
    x = x.double().numpy()
    rd = x.shape[-1] if rotary_dim is None else rotary_dim
    inv_freq = BASE ** (-np.arange(0, rd, 2, dtype=np.float64) / rd)
    angles = np.asarray(positions, dtype=np.float64)[..., None] * inv_freq
    if angles.ndim == 3:  # [batch, seq, pairs]: line up with x[b, h, s, :]
        angles = angles[:, None]
    cos, sin = np.cos(angles), np.sin(angles)
    out = x.copy()
    if layout == "half":
        a, b = x[..., : rd // 2], x[..., rd // 2 : rd]
        out[..., : rd // 2], out[..., rd // 2 : rd] = a * cos - b * sin, b * cos + a * sin
    else:
        a, b = x[..., 0:rd:2], x[..., 1:rd:2]
        out[..., 0:rd:2], out[..., 1:rd:2] = a * cos - b * sin, b * cos + a * sin
    return out


def relative_error(got: torch.Tensor, want: np.ndarray) -> float:
    return float(np.abs(got.double().numpy() - want).max() / np.abs(want).max())


TOLERANCE = {torch.float32: 4e-6, torch.bfloat16: 2 ** -7}


def call_paths(rot, q, k, positions):
    """``(name, q', k')`` of the three ways to call the module, inputs left as they were."""
    yield ("new", *rot(q, positions, k=k))
    qo, ko = torch.empty_like(q), torch.empty_like(k)
    rot(q, positions, k=k, out=(qo, ko))
    yield "out", qo, ko
    qi, ki = q.clone(), k.clone()
    rot(qi, positions, k=ki, inplace=True)
    yield "inplace", qi, ki


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("tile", [1 << 20, 3 * 64 * 5], ids=["one-tile", "many-tiles"])
@pytest.mark.parametrize("rotary_dim", [None, 48])
def test_every_path_matches_float64(dtype, layout, tile, rotary_dim, monkeypatch) -> None:
    monkeypatch.setattr(tiled, "TILE_ELEMENTS", tile)  # many: 5 positions a tile, the last partial
    # past _FILL_FROM elements, so new tensors are filled by tiles too
    q, k = torch.randn(1, 4, 300, 64).to(dtype), torch.randn(1, 2, 300, 64).to(dtype)
    positions = np.array([0, 1, 4096, 70000, *range(5, 301)])
    rot = pe.RotaryEmbedding(64, base=BASE, layout=layout, rotary_dim=rotary_dim,
                             max_positions=70001)
    want_q, want_k = (rotated64(t, positions, rotary_dim=rotary_dim, layout=layout)
                      for t in (q, k))
    for name, got_q, got_k in call_paths(rot, q, k, torch.as_tensor(positions)):
        assert got_q.dtype == dtype and got_k.dtype == dtype, name
        assert relative_error(got_q, want_q) < TOLERANCE[dtype], (name, relative_error(got_q, want_q))
        assert relative_error(got_k, want_k) < TOLERANCE[dtype], (name, relative_error(got_k, want_k))


def test_batched_positions_and_exact_phases_match_float64(monkeypatch) -> None:
    monkeypatch.setattr(tiled, "TILE_ELEMENTS", 2 * 8 * 32 * 7)
    q, k = torch.randn(2, 8, 40, 32), torch.randn(2, 2, 40, 32)
    positions = np.stack([np.arange(40), np.arange(1000, 1040)])
    for rot in (pe.RotaryEmbedding(32, base=BASE, max_positions=2048),
                pe.RotaryEmbedding(32, base=BASE)):  # no table: phases per call
        for name, got_q, got_k in call_paths(rot, q, k, torch.as_tensor(positions)):
            assert relative_error(got_q, rotated64(q, positions)) < 4e-6, name
            assert relative_error(got_k, rotated64(k, positions)) < 4e-6, name


def test_misplaced_table_rows_fail_the_check(monkeypatch) -> None:
    """A tiling that reads its tables one position late is caught by the float64 check."""
    monkeypatch.setattr(tiled, "TILE_ELEMENTS", 4 * 64 * 5)
    monkeypatch.setattr(tiled, "_rows", lambda table, start, stop: table[..., start + 1:stop + 1, :]
                        if stop < table.shape[-2] else table[..., start:stop, :])
    q, k = torch.randn(1, 4, 300, 64), torch.randn(1, 2, 300, 64)
    positions = np.arange(300)
    rot = pe.RotaryEmbedding(64, base=BASE, max_positions=512)
    for name, got_q, _ in call_paths(rot, q, k, torch.as_tensor(positions)):
        assert relative_error(got_q, rotated64(q, positions)) > 1e-3, name


@pytest.mark.parametrize(("call", "names"), [
    (lambda: pe.RotaryEmbedding(64, rotary_dim=5), "rotary_dim=5"),
    (lambda: pe.RotaryEmbedding(15, max_positions=8), "x.shape[-1]=15 is odd"),
    (lambda: pe.RotaryEmbedding()(torch.randn(1, 2, 4, 15), torch.arange(4)),
     "x.shape[-1]=15 is odd"),
    (lambda: pe.RotaryEmbedding(16, max_positions=8)(
        torch.randn(1, 2, 4, 16), torch.arange(4), k=torch.randn(1, 2, 3, 16)), "k has shape"),
    (lambda: pe.RotaryEmbedding(16, max_positions=8)(
        torch.randn(1, 2, 4, 16), torch.arange(4), out=torch.empty(1, 2, 4, 16).bfloat16()),
     "out[0] is torch.bfloat16"),
    (lambda: pe.RotaryEmbedding(16, max_positions=8)(
        torch.randn(1, 2, 4, 16), torch.arange(4), k=torch.randn(1, 2, 4, 16),
        out=(torch.empty(1, 2, 4, 16), torch.empty(1, 2, 4, 16).half())), "out[1] is torch.float16"),
    (lambda: pe.RotaryEmbedding(16, max_positions=8)(
        torch.randn(1, 2, 4, 16), torch.arange(4), k=torch.randn(1, 2, 4, 16).bfloat16()),
     "k is torch.bfloat16"),
])
def test_bad_input_names_the_parameter(call, names) -> None:
    with pytest.raises(ParameterError) as info:
        call()
    assert names in str(info.value)


class _Count(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def test_no_loop_over_positions(monkeypatch) -> None:
    """Within one tile the ops do not grow with the positions; tiles grow with the size."""
    monkeypatch.setattr(tiled, "TILE_ELEMENTS", 1 << 20)
    rot = pe.RotaryEmbedding(64, base=BASE, max_positions=4096)

    def ops(seq: int) -> int:
        q, k = torch.randn(1, 4, seq, 64), torch.randn(1, 2, seq, 64)
        qo, ko = torch.empty_like(q), torch.empty_like(k)
        with _Count() as count:
            rot(q, torch.arange(seq), k=k, out=(qo, ko))
        return count.ops

    assert ops(300) == ops(3000)
    monkeypatch.setattr(tiled, "TILE_ELEMENTS", 4 * 64 * 1000)  # 1000 positions of q a tile
    assert ops(3000) > ops(300)
