"""PyTorch modules (posenc.backends.torch.<Layer>): same numbers as the functions, parameters
that train and serialise, RotaryEmbedding's tables and fast paths, and compile behaviour."""

from __future__ import annotations

import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import posenc  # noqa: E402
from posenc.backends import torch as pe  # noqa: E402
from posenc.layers import all_layers  # noqa: E402

from ..layer_configs import SMALL, call, named_call  # noqa: E402


def _torch_args(values: dict) -> dict:
    return {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in values.items()}


@pytest.mark.parametrize("name", sorted(all_layers()))
def test_module_equals_the_function_with_its_parameters(name: str) -> None:
    torch.manual_seed(0)
    module = getattr(pe, name)(**SMALL[name])
    layer = all_layers()[name]
    args, kwargs = call(name)
    out = module(*[torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args],
                 **_torch_args(kwargs))
    params = dict(module.named_parameters())
    assert set(params) == {w.name for w in layer.weights if w.present(module.config)}
    direct = getattr(posenc, layer.function)(
        **_torch_args(named_call(name)), **params, **layer.function_kwargs(module.config),
        **({"dtype": torch.float32} if hasattr(module, "_anchor") else {}))
    assert torch.equal(out, direct)


@pytest.mark.parametrize("name", sorted(n for n, layer in all_layers().items() if layer.weights))
def test_parameters_train_and_round_trip_through_state_dict(name: str) -> None:
    torch.manual_seed(1)
    module = getattr(pe, name)(**SMALL[name])
    args, kwargs = call(name)
    inputs = [torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args]
    out = module(*inputs, **_torch_args(kwargs))
    out.float().square().sum().backward()
    grads = {n: p.grad for n, p in module.named_parameters()}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values()), grads
    assert any(g.abs().sum() > 0 for g in grads.values())

    buffer = io.BytesIO()
    torch.save(module.state_dict(), buffer)
    buffer.seek(0)
    fresh = getattr(pe, name)(**SMALL[name])
    fresh.load_state_dict(torch.load(buffer))
    assert torch.equal(fresh(*inputs, **_torch_args(kwargs)), out.detach())


def test_constructor_errors_name_the_argument() -> None:
    with pytest.raises(posenc.ParameterError, match=r"unknown argument.*num_head"):
        pe.T5RelativeBias(num_head=4)
    with pytest.raises(posenc.ParameterError, match=r"missing required argument.*num_heads"):
        pe.T5RelativeBias()
    with pytest.raises(posenc.ParameterError, match="layout='spiral'"):
        pe.RotaryEmbedding(64, layout="spiral")
    with pytest.raises(posenc.ParameterError, match="max_positions=0"):
        pe.RotaryEmbedding(64, max_positions=0)
    with pytest.raises(posenc.ParameterError, match="max_positions=16 needs head_dim"):
        pe.RotaryEmbedding(max_positions=16)


def test_modules_follow_dtype_and_device_moves() -> None:
    alibi = pe.ALiBiBias(num_heads=4).to(torch.float64)
    assert alibi(3, 3).dtype == torch.float64
    t5 = pe.T5RelativeBias(num_heads=4).to(torch.bfloat16)
    assert t5(3, 3).dtype == torch.bfloat16


# -- RotaryEmbedding ---------------------------------------------------------------------

LLAMA31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
           "high_freq_factor": 4.0, "original_max_position_embeddings": 64,
           "rope_theta": 500000.0}
LONGROPE = {"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [4.0] * 8,
            "original_max_position_embeddings": 20, "max_position_embeddings": 80}
CONFIGS = [
    dict(),
    dict(layout="interleaved", base=500000.0),
    dict(rotary_dim=8),
    dict(layout="interleaved", rotary_dim=8),
    dict(scaling=LLAMA31),
    dict(scaling=LONGROPE),
]


@pytest.mark.parametrize("config", CONFIGS, ids=repr)
@pytest.mark.parametrize("batched", [False, True])
def test_rotary_module_paths_equal_rope(config: dict, batched: bool) -> None:
    """Tables, q+k in one pass (k with fewer heads), in place and out= against posenc.rope."""
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(2, 4, 6, 16, generator=gen)
    k = torch.randn(2, 2, 6, 16, generator=gen)
    positions = torch.tensor([[3, 4, 5, 6, 7, 8], [20, 21, 22, 23, 24, 25]]) if batched \
        else torch.arange(17, 23)
    want_q, want_k = posenc.rope(q, positions, **config), posenc.rope(k, positions, **config)
    rotary = pe.RotaryEmbedding(16, **config, max_positions=32)
    got_q, got_k = rotary(q, positions, k=k)
    assert torch.equal(got_q, want_q) and torch.equal(got_k, want_k)
    out = (torch.empty_like(q), torch.empty_like(k))
    rotary(q, positions, k=k, out=out)
    torch.testing.assert_close(out, (want_q, want_k), rtol=0, atol=1e-6)
    q2, k2 = q.clone(), k.clone()
    returned = rotary(q2, positions, k=k2, inplace=True)
    assert returned[0] is q2 and returned[1] is k2
    torch.testing.assert_close((q2, k2), (want_q, want_k), rtol=0, atol=1e-6)


def test_rotary_offsets_and_dtypes() -> None:
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(1, 2, 3, 8, generator=gen)
    rotary = pe.RotaryEmbedding(8, max_positions=64)
    want = posenc.rope(x, torch.arange(40, 43))
    assert torch.equal(rotary(x, offset=40), want)
    assert torch.equal(rotary(x, offset=torch.tensor(40)), want)
    # 16-bit: the arithmetic runs in float32 and rounds once, as rope() does
    xb = x.to(torch.bfloat16)
    assert torch.equal(rotary(xb, offset=40), posenc.rope(xb, torch.arange(40, 43)))
    xb2 = xb.clone()
    rotary(xb2, offset=40, inplace=True)
    assert torch.equal(xb2, posenc.rope(xb, torch.arange(40, 43)))
    # float64 inputs bypass the float32 tables: exact as rope() in float64
    x64 = x.double()
    assert torch.equal(rotary(x64, offset=40), posenc.rope(x64, torch.arange(40, 43)))
    # casting the module keeps its tables float32
    assert rotary.half().cos.dtype == torch.float32
    assert torch.equal(rotary(x, offset=40), want)


@pytest.mark.parametrize("max_positions", [16, None], ids=["table", "per-call"])
def test_rotary_outputs_sharing_memory(max_positions: int | None) -> None:
    """Outputs that alias other inputs are rotated from the inputs' old values (or refused),
    never from half-written memory; views of one fused qkv tensor rotate in place."""
    gen = torch.Generator().manual_seed(4)
    rotary = pe.RotaryEmbedding(8, max_positions=max_positions)
    pos = torch.arange(5)
    q, k = torch.randn(2, 3, 5, 8, generator=gen), torch.randn(2, 3, 5, 8, generator=gen)
    want_q, want_k = posenc.rope(q, pos), posenc.rope(k, pos)
    # results written to each other's input
    q2, k2 = q.clone(), k.clone()
    rotary(q2, pos, k=k2, out=(k2, q2))
    torch.testing.assert_close((k2, q2), (want_q, want_k), rtol=0, atol=1e-6)
    # an output that is a view of its own input, and one shifted along the sequence
    q2 = q.clone()
    rotary(q2, pos, out=q2.view(q2.shape))
    torch.testing.assert_close(q2, want_q, rtol=0, atol=1e-6)
    base = torch.zeros(2, 3, 6, 8)
    base[:, :, :5] = q
    rotary(base[:, :, :5], pos, out=base[:, :, 1:])
    torch.testing.assert_close(base[:, :, 1:], want_q, rtol=0, atol=1e-6)
    # q and k as slices of one fused tensor (k with fewer heads), in place
    fused = torch.cat([q, k[:, :1]], dim=1)
    rotary(fused[:, :3], pos, k=fused[:, 3:], inplace=True)
    torch.testing.assert_close(fused, torch.cat([want_q, want_k[:, :1]], dim=1), rtol=0,
                               atol=1e-6)
    # the same memory twice: refused
    q2 = q.clone()
    with pytest.raises(posenc.ParameterError, match="k the same memory as q"):
        rotary(q2, pos, k=q2.view(q2.shape), inplace=True)
    out = torch.empty_like(q)
    with pytest.raises(posenc.ParameterError, match=r"out\[0\] and out\[1\] are the same"):
        rotary(q, pos, k=k, out=(out, out))


def test_rotary_table_bounds_and_argument_errors() -> None:
    x = torch.randn(1, 2, 3, 8)
    rotary = pe.RotaryEmbedding(8, max_positions=16)
    with pytest.raises(posenc.PositionOutOfRangeError, match="positions contains 16"):
        rotary(x, torch.tensor([14, 15, 16]))
    with pytest.raises(posenc.ParameterError, match="positions or offset"):
        rotary(x, torch.arange(3), offset=2)
    with pytest.raises(posenc.ParameterError, match=r"x.shape\[-1\]=6 .* head_dim=8"):
        rotary(torch.randn(1, 2, 3, 6), torch.arange(3))
    with pytest.raises(posenc.ParameterError, match="k has shape"):
        rotary(x, torch.arange(3), k=torch.randn(1, 2, 4, 8))
    with pytest.raises(posenc.ParameterError, match=r"out\[0\] is torch.float32 \(1, 2, 3, 4\)"):
        rotary(x, torch.arange(3), out=torch.empty(1, 2, 3, 4))
    with pytest.raises(posenc.ParameterError, match="inplace=True or out="):
        rotary(x, torch.arange(3), inplace=True, out=torch.empty_like(x))
    with pytest.raises(posenc.ParameterError, match=r"head_dim must be an int, got 8.0"):
        pe.RotaryEmbedding(8.0)
    for offset in (2.0, True):
        with pytest.raises(posenc.ParameterError, match=rf"offset must be an int, got {offset}"):
            rotary(x, offset=offset)
    with pytest.raises(posenc.ParameterError, match=r"got a torch.bool tensor"):
        rotary(x, offset=torch.tensor(True))
    # the width is checked on every path, not only where the tables are read
    with pytest.raises(posenc.ParameterError, match=r"x.shape\[-1\]=6 .* head_dim=8"):
        pe.RotaryEmbedding(8)(torch.randn(1, 2, 3, 6))
    with pytest.raises(posenc.ParameterError, match=r"x.shape\[-1\]=6 .* head_dim=8"):
        rotary(torch.randn(1, 2, 3, 6, dtype=torch.float64), torch.arange(3))
    with pytest.raises(posenc.ParameterError, match=r"scaling\['rope_type'\] must be a string"):
        pe.rope_frequencies(8, scaling={"rope_type": ["linear"]})
    with pytest.raises(posenc.MixedArrayLibrariesError):
        rotary(x, np.arange(3))
    with pytest.raises(posenc.ParameterError, match="x must have a real floating dtype"):
        rotary(torch.ones(1, 2, 3, 8, dtype=torch.int64))
    # no positions: the table rows of arange(seq), equal to rope() without positions
    assert torch.equal(rotary(x), posenc.rope(x))
    # beyond the tables without them: per-call cos/sin, any position
    far = pe.RotaryEmbedding(8)
    assert torch.equal(far(x, offset=1_000_000), posenc.rope(x, torch.arange(1_000_000, 1_000_003)))


@pytest.mark.slow
def test_decode_offsets_compile_once_without_graph_breaks() -> None:
    """One graph for every offset when the offset is a tensor (torch.compile fullgraph)."""
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    rotary = pe.RotaryEmbedding(16, base=500000.0, max_positions=2048)
    compiled = torch.compile(rotary, backend=counter, fullgraph=True)
    q, k = torch.randn(1, 4, 1, 16), torch.randn(1, 2, 1, 16)
    for offset in (7, 300, 2047):
        got = compiled(q, k=k, offset=torch.tensor(offset))
        want = rotary(q, k=k, offset=offset)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert counter.frame_count == 1


@pytest.mark.slow
@pytest.mark.parametrize(("scaling", "kwargs", "positions"), [
    ({"rope_type": "ntk", "factor": 8.0}, {}, True),
    ({"type": "dynamic", "factor": 2.0, "max_position_embeddings": 2048}, {"seq_len": 8192},
     True),
    ({"type": "dynamic", "factor": 2.0, "max_position_embeddings": 16}, {}, False),
])
def test_ntk_scalings_trace_in_float64(scaling: dict, kwargs: dict, positions: bool) -> None:
    """NTK-scaled bases under torch.compile(fullgraph=True) in float64, where the module
    computes its frequencies in the graph: the scaled base's overflow check must not call
    math.isfinite on a traced float (it did: the exhaustive tier's torch-layers float64 group
    failed its ntk and dynamic cases with "torch.* op returned non-Tensor")."""
    rotary = pe.RotaryEmbedding(64, scaling=scaling, **kwargs).to(torch.float64)
    x = torch.randn(1, 2, 40, 64, dtype=torch.float64)
    args = (x, torch.arange(40)) if positions else (x,)
    got = torch.compile(rotary, backend="eager", fullgraph=True)(*args)
    assert torch.equal(got, rotary(*args))


@pytest.mark.slow
def test_compiled_module_trains_its_parameters() -> None:
    """A learned table under torch.compile(fullgraph=True): forward and backward, one graph."""
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    module = pe.T5RelativeBias(num_heads=2, num_buckets=8, max_distance=16)
    compiled = torch.compile(module, backend=counter, fullgraph=True)
    compiled(4, 4).sum().backward()
    eager_grad = module.table.grad.clone()
    module.table.grad = None
    module(4, 4).sum().backward()
    assert torch.equal(eager_grad, module.table.grad)
    assert counter.frame_count == 1
