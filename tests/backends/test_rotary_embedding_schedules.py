"""``pe.RotaryEmbedding`` takes its schedule and tables from the core: for every schedule form,
with and without ``max_positions``, it rotates exactly as ``posenc.rope``."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import posenc  # noqa: E402
from posenc import rotary  # noqa: E402
from posenc.backends import torch as pe  # noqa: E402

HUNYUAN = {"type": "dynamic", "alpha": 1000.0, "factor": 1.0, "beta_fast": 32, "beta_slow": 1,
           "mscale": 1.0, "mscale_all_dim": 1.0}
SCHEDULES = {
    "default": ({}, {}),
    "interleaved": ({}, {"layout": "interleaved", "base": 500000.0}),
    "partial": ({}, {"rotary_dim": 8}),
    "linear": ({"rope_type": "linear", "factor": 4.0}, {}),
    "ntk": ({"rope_type": "ntk", "factor": 8.0}, {}),
    "dynamic+seq_len": ({"rope_type": "dynamic", "factor": 2.0,
                         "max_position_embeddings": 16}, {"seq_len": 48}),
    "yarn": ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}, {}),
    "longrope": ({"rope_type": "longrope", "short_factor": [1.0] * 8,
                  "long_factor": [4.0] * 8, "original_max_position_embeddings": 20,
                  "max_position_embeddings": 80}, {}),
    "llama3": ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 16,
                "rope_theta": 500000.0}, {}),
    "dynamic+alpha (Hunyuan)": (HUNYUAN, {}),
    "xdrope+alpha (HunyuanOCR)": ({"type": "xdrope", "alpha": 1000.0}, {}),
    "ntk_alpha": ({"rope_type": "ntk_alpha", "alpha": 50.0}, {"layout": "interleaved"}),
    "proportional": ({"rope_type": "proportional", "partial_rotary_factor": 0.5}, {}),
}
POSITIONS = {"short": lambda: torch.arange(3, 9),
             # LongRoPE switches to its long factors here (max + 1 > 20)
             "batched, long": lambda: torch.tensor([[0, 1, 2, 3, 4, 5], [30, 31, 32, 33, 34, 35]])}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("where", POSITIONS)
@pytest.mark.parametrize("form", SCHEDULES)
def test_module_equals_rope(form: str, where: str, dtype: torch.dtype) -> None:
    scaling, kwargs = SCHEDULES[form]
    config = {**kwargs, "scaling": scaling or None}
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(2, 4, 6, 16, generator=gen, dtype=dtype)
    k = torch.randn(2, 2, 6, 16, generator=gen, dtype=dtype)
    positions = POSITIONS[where]()
    want = posenc.rope(q, positions, **config), posenc.rope(k, positions, **config)
    for max_positions in (64, None):
        module = pe.RotaryEmbedding(16, **config, max_positions=max_positions)
        got = module(q, positions, k=k)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), max_positions


@pytest.mark.parametrize("form", SCHEDULES)
def test_tables_are_the_cores(form: str) -> None:
    """The module's table is the core's, and its rows are the cos/sin ``posenc.rope`` uses."""
    scaling, kwargs = SCHEDULES[form]
    config = {**kwargs, "scaling": scaling or None}
    rows = 20  # LongRoPE's short table (its switch length)
    module = pe.RotaryEmbedding(16, **config, max_positions=rows)
    layout = kwargs.get("layout", "half")
    x = torch.zeros(1, rows, 16)
    cos, sin, rd = posenc.encodings.rope.rope_cos_sin(x, torch.arange(rows), **config)
    assert torch.equal(module.cos, cos) and torch.equal(module.sin, sin)
    xp = posenc.array_api.namespace(x=x)
    table = torch.stack([rotary.widen(xp, cos, layout),
                         rotary.widen(xp, sin, layout) * _signs(rd, layout)], 1)
    assert torch.equal(module.table, table)


def _signs(rd: int, layout: str) -> torch.Tensor:
    return torch.tensor(rotary.signed_frequencies([1.0] * (rd // 2), layout))


def test_hunyuan_alpha_builds_tables_without_seq_len() -> None:
    """dynamic + alpha is a fixed NTK-alpha: no table depends on a length (the module refused
    max_positions, asking for seq_len)."""
    module = pe.RotaryEmbedding(16, scaling=HUNYUAN, max_positions=8)
    inv_freq, factor = pe.rope_frequencies(16, scaling=HUNYUAN, dtype=torch.float64)
    angles = torch.arange(8, dtype=torch.float64)[:, None] * inv_freq
    torch.testing.assert_close(module.cos, (factor * torch.cos(angles)).float(), rtol=0,
                               atol=1e-6)


def test_dynamic_without_seq_len_has_no_table() -> None:
    """Plain dynamic NTK scales with each call's length: no table, per-call cos/sin."""
    scaling = {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 4}
    with pytest.raises(posenc.ParameterError, match=r"needs head_dim \(and seq_len"):
        pe.RotaryEmbedding(16, scaling=scaling, max_positions=8)
    x = torch.randn(1, 2, 6, 16)
    assert torch.equal(pe.RotaryEmbedding(16, scaling=scaling)(x),
                       posenc.rope(x, scaling=scaling))
