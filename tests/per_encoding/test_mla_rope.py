"""MLA decoupled rope: bad inputs on every backend; the goldens against transformers'
DeepseekV3Attention (the queries, keys, cached k_rot and softmax scale it hands to attention,
rope_interleave True and False) and against DeepSeek's complex-pair apply_rotary_emb
(transcribed from deepseek-ai/DeepSeek-V3 inference/model.py) for the interleaved layout."""

from __future__ import annotations

import numpy as np
import pytest

from posenc import golden
from posenc.catalog import specs
from posenc.errors import ParameterError

Q = np.linspace(-1, 1, 2 * 3 * 4 * 12).reshape(2, 3, 4, 12)
K = np.linspace(-1, 1, 2 * 4 * 4).reshape(2, 1, 4, 4)


@pytest.mark.parametrize(
    ("q", "k_rot", "kwargs", "message"),
    [
        (Q, K, {"layout": "neox"}, r"layout='neox' is not one of"),
        (Q, K[..., :3], {}, r"k_rot.shape\[-1\]=3 \(qk_rope_head_dim\) must be even"),
        (Q, np.zeros((2, 1, 4, 12)), {},
         r"k_rot.shape\[-1\]=12 \(qk_rope_head_dim\) must be even, >= 2 and less than "
         r"q.shape\[-1\]=12"),
        (Q, K[:, :, :3], {}, r"q has 4 tokens \(shape \(2, 3, 4, 12\)\) but k_rot has 3"),
        (Q[0, 0, 0], K, {}, r"q and k_rot must have shape \[..., seq, dim\]"),
        (Q, K, {"scaling": {"rope_type": "yarn", "factor": "40", "mscale_all_dim": 1.0,
                            "original_max_position_embeddings": 4096}},
         r"factor"),
    ],
)
def test_bad_input_raises_a_parameter_error_naming_it(pe, q, k_rot, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.mla_rope(q, k_rot, **kwargs)


def _deepseek(monkeypatch, case, rope_interleave: bool):
    """(query_states, key_states, scaling, cached k_rot, q, k_rot) of DeepseekV3Attention on
    hidden states whose projections are the case's q and k_rot."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import DynamicCache
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as m
    from transformers.models.deepseek_v3.configuration_deepseek_v3 import DeepseekV3Config

    spec = specs()["mla_rope"]
    params = {**spec.defaults(), **case.params}
    q, k_rot = case.inputs["q"], case.inputs["k_rot"]
    heads, seq, dim = q.shape[-3], q.shape[-2], q.shape[-1]
    r = k_rot.shape[-1]
    scaling = params["scaling"] or {}
    config = DeepseekV3Config(
        hidden_size=32, num_attention_heads=heads, num_key_value_heads=heads, q_lora_rank=None,
        kv_lora_rank=8, qk_nope_head_dim=dim - r, qk_rope_head_dim=r, v_head_dim=4,
        rope_interleave=rope_interleave, vocab_size=32, num_hidden_layers=1,
        intermediate_size=32, moe_intermediate_size=16, n_routed_experts=2,
        num_experts_per_tok=1, first_k_dense_replace=1, max_position_embeddings=163840,
        rope_parameters={"rope_theta": params["base"],
                         "rope_type": scaling.get("rope_type", scaling.get("type", "default")),
                         **{k: v for k, v in scaling.items() if k not in ("type", "rope_type")}})
    config._attn_implementation = "eager"
    seen = {}
    original = m.eager_attention_forward

    def capture(module, query, key, value, mask, **kwargs):
        seen.update(query=query.detach().double(), key=key.detach().double(),
                    scaling=kwargs["scaling"])
        return original(module, query, key, value, mask, **kwargs)

    monkeypatch.setattr(m, "eager_attention_forward", capture)
    layer = m.DeepseekV3Attention(config, 0).double().eval()
    # hidden = identity rows: q_proj and kv_a_proj_with_mqa weights carry the case's values
    batch = q.shape[0] if q.ndim == 4 else 1
    q4 = q.reshape(batch, heads, seq, dim)
    k4 = k_rot.reshape(batch, 1, seq, r)
    hidden = torch.eye(32, dtype=torch.float64)[None, :seq].expand(batch, seq, 32).clone()
    with torch.no_grad():
        outs = []
        for b in range(batch):  # each batch row has its own weights: run them one by one
            layer.q_proj.weight.zero_()
            layer.q_proj.weight[:, :seq] = torch.tensor(q4[b].transpose(0, 2, 1).reshape(-1, seq))
            layer.kv_a_proj_with_mqa.weight.zero_()
            layer.kv_a_proj_with_mqa.weight[8:, :seq] = torch.tensor(k4[b, 0].T)
            cache = DynamicCache(config=config)
            positions = case.inputs["positions"]
            positions = np.arange(seq) if positions is None else np.asarray(positions)
            position_ids = torch.tensor(positions if positions.ndim == 1 else positions[b])[None]
            rotary = m.DeepseekV3RotaryEmbedding(config)
            cos_sin = tuple(t.double() for t in rotary(hidden[b:b + 1], position_ids))
            layer(hidden[b:b + 1], cos_sin, None, cache=cache)
            outs.append((seen["query"][0].numpy(), seen["key"][0].numpy(),
                         cache.layers[0].values[0].double().numpy()))
    query = np.stack([o[0] for o in outs]).reshape(q.shape)
    key = np.stack([o[1] for o in outs])
    cached = np.stack([o[2] for o in outs]).reshape(k_rot.shape)
    return query, key, seen["scaling"], cached


def _split(case):
    q, k_rot = case.inputs["q"], case.inputs["k_rot"]
    n_q, n_k = q.size, k_rot.size
    out = case.output
    return out[:n_q].reshape(q.shape), out[n_q:n_q + n_k].reshape(k_rot.shape), float(out[-1])


@pytest.mark.parametrize("case_name", ["deepseek_v3_yarn", "deepseek_v2_lite_mscale",
                                       "half_no_scaling", "decode_batched_far_positions"])
def test_oracle_transformers_deepseek_v3(monkeypatch, case_name) -> None:
    spec = specs()["mla_rope"]
    case = golden.load(spec).cases[case_name]
    params = {**spec.defaults(), **case.params}
    query, key, scaling, cached = _deepseek(monkeypatch, case, params["layout"] == "deinterleave")
    q_out, k_out, scale = _split(case)
    r = case.inputs["k_rot"].shape[-1]
    # transformers' cos/sin are float32: angles m·θ off by up to m·2^-24 rad
    positions = case.inputs["positions"]
    top = case.inputs["q"].shape[-2] if positions is None else int(np.max(positions)) + 1
    tol = {"rtol": 0, "atol": 4e-6 + 4 * top * 2.0**-24 * float(np.abs(case.inputs["q"]).max())}
    np.testing.assert_allclose(query, q_out, **tol)
    np.testing.assert_allclose(cached, k_out, **tol)
    # the one rotary key head, broadcast to every query head
    heads = case.inputs["q"].shape[-3]
    k_heads = np.broadcast_to(k_out.reshape(-1, 1, *k_out.shape[-2:]),
                              (key.shape[0], heads, *k_out.shape[-2:]))
    np.testing.assert_allclose(key[..., -r:], k_heads, **tol)
    assert scaling == pytest.approx(scale, rel=1e-12)


def test_oracle_deepseek_reference_interleaved() -> None:
    """DeepSeek's apply_rotary_emb: x viewed as complex pairs (2j, 2j+1) times freqs_cis, the
    frequencies from transformers' DeepSeek-V3 YaRN (rope_init_fn, float64)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.deepseek_v3.configuration_deepseek_v3 import DeepseekV3Config

    spec = specs()["mla_rope"]
    case = golden.load(spec).cases["interleaved_reference_code"]
    scaling = case.params["scaling"]
    q, k_rot = case.inputs["q"], case.inputs["k_rot"]
    r = k_rot.shape[-1]
    config = DeepseekV3Config(qk_rope_head_dim=r, rope_parameters={
        "rope_theta": 10000.0, "rope_type": "yarn", **scaling})
    inv_freq, attention = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    freqs = torch.outer(torch.arange(q.shape[-2], dtype=torch.float64), inv_freq.double())
    freqs_cis = torch.polar(torch.ones_like(freqs) * attention, freqs)

    def apply_rotary_emb(x: torch.Tensor) -> torch.Tensor:  # x [b, s, h, d]
        x = torch.view_as_complex(x.view(*x.shape[:-1], -1, 2))
        return torch.view_as_real(x * freqs_cis.view(1, x.size(1), 1, x.size(-1))).flatten(3)

    def rotated(x: np.ndarray) -> np.ndarray:
        t = torch.tensor(x).transpose(1, 2).contiguous()
        return apply_rotary_emb(t).transpose(1, 2).numpy()

    q_out, k_out, scale = _split(case)
    nope = q.shape[-1] - r
    np.testing.assert_allclose(q_out[..., :nope], q[..., :nope], rtol=0, atol=0)
    np.testing.assert_allclose(q_out[..., nope:], rotated(q[..., nope:]), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(k_out, rotated(k_rot), rtol=1e-6, atol=1e-7)
    assert scale == pytest.approx(q.shape[-1] ** -0.5 * (0.1 * np.log(40) + 1) ** 2, rel=1e-12)
