"""Query temperature: bad inputs on every backend; the goldens against transformers' Llama 4
NoPE attention (the queries it hands to attention, with a KV cache, so that cache positions and
position ids differ) and Ministral 3's get_llama_4_attn_scale."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from posenc import golden
from posenc.catalog import specs
from posenc.errors import ParameterError

CACHE = np.arange(4, 8)
IDS = np.array([[4, 5, 6, 7], [0, 1, 2, 3]])


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((CACHE,), {"form": "llama3"}, r"form='llama3' is not one of"),
        ((CACHE,), {"floor_scale": 0}, r"floor_scale=0 must be a positive int"),
        ((CACHE,), {"floor_scale": 8.5}, r"floor_scale=8.5 must be a positive int"),
        ((CACHE,), {"floor_scale": True}, r"floor_scale=True must be a positive int"),
        ((CACHE,), {"scale": "0.1"}, r"scale='0.1' must be a number"),
        ((CACHE[None],), {}, r"cache_position must have shape \[seq\], got shape \(1, 4\)"),
        ((CACHE * 1.0,), {}, r"cache_position must have an integer dtype, got float"),
        ((CACHE, IDS[0]), {}, r"position_ids must have shape \[batch, seq\], got shape \(4,\)"),
        ((CACHE, IDS[:, :3]), {},
         r"position_ids has shape \(2, 3\) but cache_position has 4 entries"),
    ],
)
def test_bad_input_raises_a_parameter_error_naming_it(pe, args, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.query_temperature(*args, **kwargs)


def _llama4_queries(monkeypatch, floor_scale: int, attn_scale: float, past: int, new: int):
    """(q_proj(h), the queries Llama4TextAttention hands to attention) for `new` tokens after
    `past` cached ones on a NoPE layer."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import DynamicCache
    from transformers.models.llama4 import modeling_llama4 as m
    from transformers.models.llama4.configuration_llama4 import Llama4TextConfig

    config = Llama4TextConfig(
        hidden_size=16, num_attention_heads=2, num_key_value_heads=2, head_dim=8,
        num_hidden_layers=1, no_rope_layers=[0], attn_temperature_tuning=True,
        floor_scale=floor_scale, attn_scale=attn_scale, intermediate_size=32,
        intermediate_size_mlp=32, vocab_size=32)
    config._attn_implementation = "eager"
    seen = []
    original = m.eager_attention_forward

    def capture(module, query, *args, **kwargs):
        seen.append(query.detach().clone())
        return original(module, query, *args, **kwargs)

    monkeypatch.setattr(m, "eager_attention_forward", capture)
    torch.manual_seed(0)
    layer = m.Llama4TextAttention(config, 0).eval()
    cache = DynamicCache(config=config)
    rng = np.random.default_rng(3)
    with torch.no_grad():
        if past:
            layer(torch.tensor(rng.standard_normal((1, past, 16)), dtype=torch.float32),
                  None, None, cache=cache)
        hidden = torch.tensor(rng.standard_normal((1, new, 16)), dtype=torch.float32)
        layer(hidden, None, None, cache=cache)
        plain = layer.q_proj(hidden).view(1, new, 2, 8).transpose(1, 2)
    return plain[0].numpy(), seen[-1][0].numpy()


@pytest.mark.parametrize("case_name", ["llama4_left_padded_decode", "llama4_small_floor_scale"])
def test_oracle_transformers_llama4_nope_queries(monkeypatch, case_name) -> None:
    """transformers scales the queries of a NoPE layer by the golden's temperature: for tokens
    after a cache of cache_position[0] tokens, whatever position ids the batch has."""
    spec = specs()["query_temperature"]
    case = golden.load(spec).cases[case_name]
    cache_position = case.inputs["cache_position"]
    params = {**spec.defaults(), **case.params}
    plain, scaled = _llama4_queries(monkeypatch, params["floor_scale"], params["scale"],
                                    int(cache_position[0]), cache_position.size)
    temperature = case.output.reshape(-1, cache_position.size)
    assert (temperature == temperature[0]).all(), "llama4: one row for every batch entry"
    temperature = temperature[0]
    np.testing.assert_allclose(scaled, plain * temperature[None, :, None], rtol=1e-6, atol=1e-7)


def test_oracle_llama4_expression_for_every_llama4_case() -> None:
    """transformers' Llama 4 line, log1p(floor((positions.float() + 1) / floor_scale)) *
    attn_scale + 1, over the cache positions of every llama4 golden case."""
    torch = pytest.importorskip("torch")
    spec = specs()["query_temperature"]
    for case in golden.load(spec).cases.values():
        params = {**spec.defaults(), **case.params}
        if params["form"] != "llama4":
            continue
        positions = torch.tensor(case.inputs["cache_position"], dtype=torch.float64)
        ours = torch.log1p(torch.floor((positions + 1.0) / params["floor_scale"]))
        ours = ours * params["scale"] + 1.0
        expected = np.broadcast_to(ours.numpy(), case.output.shape)
        np.testing.assert_allclose(case.output, expected, rtol=1e-15, err_msg=case.name)


def test_oracle_transformers_ministral3() -> None:
    """Every ministral3 golden case against get_llama_4_attn_scale (float64 ids, so that the
    division is exact), and posenc in float32 against it on float32 ids."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.models.ministral3.modeling_ministral3 import get_llama_4_attn_scale

    spec = specs()["query_temperature"]
    for case in golden.load(spec).cases.values():
        params = {**spec.defaults(), **case.params}
        if params["form"] != "ministral3":
            continue
        ids = case.inputs["position_ids"]
        ids = case.inputs["cache_position"][None] if ids is None else ids
        scale = get_llama_4_attn_scale(torch.tensor(ids, dtype=torch.float64), params["scale"],
                                       params["floor_scale"])[:, 0, :, 0].numpy()
        np.testing.assert_allclose(case.output, scale.reshape(case.output.shape), rtol=1e-15)
    ids = torch.tensor([[0, 16383, 16384, 50000], [0, 0, 7, 16384]])
    expected = get_llama_4_attn_scale(ids, 0.1, 16384)[:, 0, :, 0].numpy()
    ours = posenc.query_temperature(np.arange(4), ids.numpy(), form="ministral3",
                                    floor_scale=16384)
    np.testing.assert_allclose(ours, expected, rtol=1e-6)


# --------------------------------------------------------------------------------------------
# Dual Chunk Attention's length temperature: vLLM is not installed here; its rule transcribed
# from vllm/attention/backends/dual_chunk_flash_attn.py at cff7e054 (DualChunkFlashAttention
# Metadata.prefill_metadata / decode_metadata), and values computed by hand
# --------------------------------------------------------------------------------------------


def _vllm_scaling_factor(orig_seq_lens, original_max_position_embeddings: int):
    """vLLM: (0.1 * torch.log(orig_seq_lens / original_max_position_embeddings) + 1.0)
    .clip(min=1), over the int tensor of max(prompt_len, seq_len) per sequence."""
    torch = pytest.importorskip("torch")
    lens = torch.tensor(orig_seq_lens, dtype=torch.int)
    return (0.1 * torch.log(lens / original_max_position_embeddings) + 1.0).clip(min=1)


@pytest.mark.oracle
def test_dual_chunk_goldens_vs_vllm_transcription() -> None:
    spec = specs()["query_temperature"]
    cases = {n: c for n, c in golden.load(spec).cases.items() if n.startswith("dual_chunk")}
    assert len(cases) == 4
    for name, case in cases.items():
        p = case.params
        if p.get("scale", 0.1) != 0.1:
            continue  # vLLM hard-codes 0.1
        n = int(case.inputs["cache_position"].max()) + 1  # the sequence's length
        theirs = float(_vllm_scaling_factor([n], p["floor_scale"])[0])
        np.testing.assert_allclose(case.output, theirs, rtol=3e-7, atol=0, err_msg=name)
        ours = posenc.query_temperature(case.inputs["cache_position"],
                                        case.inputs.get("position_ids"), **p)
        np.testing.assert_allclose(ours, theirs, rtol=3e-7, atol=0, err_msg=name)


def test_dual_chunk_by_hand() -> None:
    """n = 4F: 1 + 0.1 ln 4; Qwen2.5-1M at n = 1e6: 1 + 0.1 ln(1e6 / 262144) = 1 + 0.1 *
    1.3388...; n <= F: 1; scale 0.5 over F = 3 at n = 20: 1 + 0.5 ln(20/3)."""
    dc = {"form": "dual_chunk", "dtype": np.float64}
    prefill = posenc.query_temperature(np.arange(4096), floor_scale=1024, **dc)
    np.testing.assert_allclose(prefill, 1.138629436111989, rtol=1e-15, atol=0)
    assert posenc.query_temperature(np.array([999999]), floor_scale=262144, **dc)[0] == (
        pytest.approx(1.1338861307885257, rel=1e-14))
    np.testing.assert_array_equal(
        posenc.query_temperature(np.arange(262144), floor_scale=262144, **dc), 1.0)
    np.testing.assert_array_equal(
        posenc.query_temperature(np.array([5]), floor_scale=262144, **dc), 1.0)
    assert posenc.query_temperature(np.arange(20), floor_scale=3, scale=0.5, **dc)[7] == (
        pytest.approx(1.9485599924429406, rel=1e-14))


def test_dual_chunk_is_one_value_per_sequence() -> None:
    """The whole prompt's length, not each token's position: a prefill's first token gets the
    temperature of the last (Llama 4's form would not), and position_ids only give the shape."""
    cache = np.arange(3000)
    dc = posenc.query_temperature(cache, form="dual_chunk", floor_scale=1000, dtype=np.float64)
    assert dc[0] == dc[-1] > 1.0
    ids = np.stack([cache, cache - 5])
    batch = posenc.query_temperature(cache, ids, form="dual_chunk", floor_scale=1000,
                                     dtype=np.float64)
    assert batch.shape == (2, 3000)
    np.testing.assert_array_equal(batch, dc[0])
    empty = posenc.query_temperature(np.zeros(0, np.int64), form="dual_chunk")
    assert empty.shape == (0,)
