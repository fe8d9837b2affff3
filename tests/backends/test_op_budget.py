"""What one call costs in PyTorch eager mode, counted, not timed: dispatched ATen ops (on a GPU
each non-view op is a kernel launch) and host reads (a read of a tensor's value from the host,
which on a GPU waits for the device). Budgets (issue 19), for one decode step of Llama-3-8B's
rotary (q ``[1, 32, 1, 128]``, k ``[1, 8, 1, 128]``, position 4096, theta 500000) against
transformers' ``LlamaRotaryEmbedding`` + ``apply_rotary_pos_emb`` counted in the same run:

- ``RotaryEmbedding`` with a table, decode and prefill: at most transformers' ops;
- ``RotaryEmbedding`` without a table (exact phases per call): at most 1.5x;
- ``pe.rope`` on one tensor: at most transformers' ops for q and k;
- ``T5RelativeBias`` for one decode step and ``alibi_bias(form="key_only")``: fixed budgets;
- zero host reads on every path.
Out-of-range positions stay errors: the device-side check fires (and names the value on CPU).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from posenc.backends import torch as pe  # noqa: E402
from posenc.errors import ParameterError, PositionOutOfRangeError  # noqa: E402

from ..host_reads import spy_host_reads  # noqa: E402

HOST_READS = ("_local_scalar_dense", "is_nonzero", "item")


class Counter(TorchDispatchMode):
    """Every ATen op dispatched while active, by name; ``launches`` leaves out views (metadata
    only: no kernel runs)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []
        self.views = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        self.ops.append(func.overloadpacket.__name__)
        self.views += bool(func.is_view)
        return func(*args, **(kwargs or {}))

    @property
    def launches(self) -> int:
        return len(self.ops) - self.views


def cost(fn: Callable[[], Any], monkeypatch: pytest.MonkeyPatch) -> Counter:
    """The ops of the second call (the first fills caches) and host reads by any route."""
    fn()
    reads = spy_host_reads(torch, monkeypatch)
    with Counter() as counter:
        fn()
    monkeypatch.undo()
    counter.ops += [f"host read: {r}" for r in reads]
    return counter


def host_reads(counter: Counter) -> list[str]:
    return [op for op in counter.ops if op in HOST_READS or op.startswith("host read")]


Q = torch.randn(1, 32, 1, 128)
K = torch.randn(1, 8, 1, 128)
DECODE = torch.tensor([[4096]])
Q_PREFILL = torch.randn(1, 32, 64, 128)
K_PREFILL = torch.randn(1, 8, 64, 128)


@pytest.fixture(scope="module")
def transformers_ops() -> int:
    """transformers' Llama rotary for the decode step: cos/sin, then q and k rotated."""
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    from transformers import LlamaConfig

    config = LlamaConfig(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
                         rope_theta=500000.0, max_position_embeddings=8192)
    rotary = llama.LlamaRotaryEmbedding(config)

    def step() -> Any:
        cos, sin = rotary(Q, DECODE)
        return llama.apply_rotary_pos_emb(Q, K, cos, sin)

    counter = cost(step, pytest.MonkeyPatch())
    assert counter.launches > 0
    return len(counter.ops)


def test_the_table_path_costs_no_more_than_transformers(transformers_ops: int,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    table = pe.RotaryEmbedding(128, base=500000.0, max_positions=8192)
    decode = cost(lambda: table(Q, DECODE, k=K), monkeypatch)
    prefill = cost(lambda: table(Q_PREFILL, k=K_PREFILL), monkeypatch)
    for counter in (decode, prefill):
        assert len(counter.ops) <= transformers_ops, (counter.ops, transformers_ops)
        assert host_reads(counter) == [], counter.ops


def test_exact_phases_cost_at_most_one_and_a_half_transformers(
        transformers_ops: int, monkeypatch: pytest.MonkeyPatch) -> None:
    exact = pe.RotaryEmbedding(128, base=500000.0)
    counter = cost(lambda: exact(Q, DECODE, k=K), monkeypatch)
    assert len(counter.ops) <= 1.5 * transformers_ops, (counter.ops, transformers_ops)
    assert host_reads(counter) == [], counter.ops


def test_the_functional_rope_costs_at_most_transformers_for_one_tensor(
        transformers_ops: int, monkeypatch: pytest.MonkeyPatch) -> None:
    for positions in (DECODE, DECODE[0], None):
        counter = cost(lambda p=positions: pe.rope(Q, p, base=500000.0), monkeypatch)
        assert len(counter.ops) <= transformers_ops, (counter.ops, transformers_ops)
        assert host_reads(counter) == [], counter.ops


def test_a_t5_decode_step_and_key_only_alibi_stay_small(monkeypatch: pytest.MonkeyPatch) -> None:
    t5 = pe.T5RelativeBias(num_heads=32)
    step = cost(lambda: t5(1, 4097, query_offset=4096), monkeypatch)
    alibi = cost(lambda: pe.alibi_bias(32, 1, 4097, form="key_only"), monkeypatch)
    # T5: relative positions, their buckets (a log branch and a clamp), one gather; ALiBi: a
    # distance row times the slopes. Budgets with no slack to speak of: a regression shows.
    assert len(step.ops) <= 18, step.ops
    assert len(alibi.ops) <= 8, alibi.ops
    assert host_reads(step) == host_reads(alibi) == [], (step.ops, alibi.ops)


def test_the_counter_sees_host_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The instrument itself: a path that reads a value back is caught by each route."""
    x = torch.arange(4)
    for read in (lambda: x.max().item(), lambda: bool(x.max() > 2), lambda: x.tolist(),
                 lambda: int(x[0])):
        assert host_reads(cost(read, monkeypatch)), read


def test_the_device_side_range_check_fires_and_names_the_value() -> None:
    """Positions past a table, or past float32's exact integers, are still errors in eager
    mode although no value is read back on the hot path."""
    table = pe.RotaryEmbedding(128, max_positions=64)
    with pytest.raises(PositionOutOfRangeError, match=r"positions contains 64, outside .*64\)"):
        table(Q, torch.tensor([[64]]), k=K)
    with pytest.raises(ParameterError, match=f"positions contains {2**24 + 2}, beyond 2"):
        pe.rope(Q, torch.tensor([2**24 + 2]))
    exact = pe.RotaryEmbedding(128)
    with pytest.raises(ParameterError, match=f"positions contains {-(2**25)}, beyond 2"):
        exact(Q, torch.tensor([-(2**25)]), k=K)


def test_out_of_table_positions_are_nan_rows_under_compile() -> None:
    table = pe.RotaryEmbedding(8, max_positions=16)
    x = torch.ones(1, 1, 2, 8)
    compiled = torch.compile(lambda x, p: table(x, p), backend="aot_eager", fullgraph=True)
    out = compiled(x, torch.tensor([3, 16]))
    assert not out[..., 0, :].isnan().any() and out[..., 1, :].isnan().all(), out
    assert math.isfinite(float(table(x, torch.tensor([3, 15]))[..., 1, :].sum()))
