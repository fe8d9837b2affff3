"""``posenc sweep vllm`` (conformance/sweeps/vllm.py): its judge and recorder without vLLM, on
synthetic observations whose rotations tests/peers/test_engine_sweeps.py writes out in
float64; vLLM itself only where it is installed (``nox -s sweep-vllm``)."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.conformance.sweeps import vllm as vllm_sweep
from posenc.conformance.sweeps.vllm_observer import GetRopeRecorder, architecture

from .test_engine_sweeps import _observation


def _vllm_observation(mutate: str = "", held: tuple[int, ...] = (0, 1)) -> dict:
    obs = _observation(mutate, calls_on=held)
    obs["applied"] += obs.pop("calls")
    return {**obs, "calls": [], "forward": vllm_sweep.FORWARD, "held": list(held)}


def test_a_correct_engine_conforms() -> None:
    row = vllm_sweep.judge("synthetic", _vllm_observation(), ("half",))
    assert row.verdict == "conforms", row.reason


@pytest.mark.parametrize(("mutant", "diagnosis"), [
    ("base", "rope_theta is not read"), ("full width", "partial rotary width is ignored"),
    ("interleaved", "pairs as 'interleaved'")])
def test_a_planted_bug_diverges_with_its_diagnosis(mutant: str, diagnosis: str) -> None:
    row = vllm_sweep.judge("synthetic", _vllm_observation(mutant), ("half",))
    assert row.verdict == "diverges" and diagnosis in row.reason, row.reason


def test_a_layer_without_a_rotary_module_diverges_unless_transformers_leaves_it_so() -> None:
    obs = _vllm_observation(held=(0,))
    row = vllm_sweep.judge("synthetic", obs, ("half",))
    assert row.verdict == "diverges"
    assert row.reason.startswith("no rotary module on a layer posenc reads as rotated (layers 1)")
    assert vllm_sweep.judge("synthetic", obs, ("half",), frozenset({1})).verdict == "conforms"


def test_a_model_holding_no_rotary_module_is_not_checkable_not_a_divergence() -> None:
    obs = {**_vllm_observation(), "applied": [], "held": []}
    row = vllm_sweep.judge("synthetic", obs, ("half",))
    assert row.verdict == "not checkable" and "no attention layer holds" in row.reason


def test_the_recorder_keeps_arguments_and_the_asking_layer() -> None:
    def get_rope(head_size: int, max_position: int, is_neox_style: bool = True,
                 rope_parameters: dict | None = None, dtype: object = None) -> object:
        return object()

    recorder = GetRopeRecorder(get_rope)

    def attention_init(prefix: str) -> object:  # as vLLM's attention constructors do
        return recorder(64, 4096, False, rope_parameters={"rope_theta": 5e5}, dtype="f32")

    attention_init("model.layers.3.self_attn")
    assert recorder.calls == [{"prefix": "model.layers.3.self_attn", "module": "object",
                               "args": {"head_size": 64, "max_position": 4096,
                                        "is_neox_style": False,
                                        "rope_parameters": {"rope_theta": 5e5}}}]
    line = vllm_sweep._received(recorder.calls * 2)
    assert line == ("object(head_size=64, max_position=4096, is_neox_style=False, "
                    "rope_parameters={'rope_theta': 500000.0}) <- 2 x model.layers.3.self_attn")


def test_the_architecture_is_one_vllm_registers() -> None:
    transformers = pytest.importorskip("transformers")

    class Family:
        name = "llama"

    config = transformers.LlamaConfig()
    assert architecture(Family(), config, {"LlamaForCausalLM"}) == "LlamaForCausalLM"
    assert architecture(Family(), config, {"MistralForCausalLM"}) is None


@pytest.mark.parametrize(("family", "verdict"), [
    ("llama", "conforms"), ("qwen2", "conforms"), ("gemma3", "conforms"),
    # hold a rotary on every layer and call it on the sliding ones only (the forward check)
    ("cohere2", "conforms"), ("exaone4", "conforms"),
    # built only with the checkpoint keys transformers drops (vllm_hub_keys)
    ("minimax_m2", "conforms"), ("mimo_v2_flash", "conforms"),
    # two attentions per block, which transformers numbers 2i and 2i + 1
    ("longcat_flash", "conforms")])
def test_the_vllm_sweep_on_representative_families(family: str, verdict: str) -> None:
    pytest.importorskip("vllm")
    from posenc.conformance.sweeps.transformers_families import discover

    row = vllm_sweep.sweep(discover([family]), {})[0]
    assert row.verdict == verdict, row.reason
    assert "get_rope" not in row.received and "head_size=" in row.received


def test_the_checkpoint_keys_state_the_same_model(tmp_path) -> None:
    import json

    from posenc.conformance.sweeps.vllm_hub_keys import add

    saved = tmp_path / "config.json"
    saved.write_text(json.dumps({
        "model_type": "minimax_m2", "hidden_size": 64, "num_attention_heads": 4,
        "head_dim": 32, "rope_parameters": {"rope_theta": 5e6, "partial_rotary_factor": 0.5}}))
    assert add(saved) == {"rotary_dim": 16, "scoring_func": "sigmoid"}
    assert json.loads(saved.read_text())["rotary_dim"] == 16
    saved.write_text(json.dumps({
        "model_type": "mimo_v2_flash", "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 48, "sliding_window": 4, "layer_types": ["full_attention",
                                                             "sliding_attention"],
        "rope_parameters": {"full_attention": {"rope_theta": 5e6, "partial_rotary_factor": 0.5},
                            "sliding_attention": {"rope_theta": 1e4}}}))
    added = add(saved)
    assert added["hybrid_layer_pattern"] == [0, 1]
    assert (added["rope_theta"], added["swa_rope_theta"], added["partial_rotary_factor"]) == \
        (5e6, 1e4, 0.5)
    saved.write_text(json.dumps({"model_type": "glm4_moe", "hidden_size": 64,
                                 "num_attention_heads": 4, "head_dim": 8}))
    assert add(saved) == {}  # a key the config has is never replaced
    saved.write_text(json.dumps({"model_type": "llama"}))
    assert add(saved) == {}


def test_a_partial_rotation_is_padded_to_the_head_in_posenc_s_layout() -> None:
    torch = pytest.importorskip("torch")
    from posenc.conformance.sweeps.vllm_hf_backend import to_heads

    x = torch.arange(2 * 3 * 5 * 4, dtype=torch.float32).reshape(1, 3, 5, 4 * 2)[..., :4]
    xs, ys = to_heads(x, x + 1, 1, 8)
    assert np.array_equal(ys[..., :4], x.numpy() + 1)
    assert xs.shape == (1, 3, 5, 8) and xs.dtype == np.float64
    assert np.array_equal(xs[..., :4], x.numpy()) and not xs[..., 4:].any()
    xs, _ = to_heads(x.transpose(1, 2), x.transpose(1, 2), 2, 4)  # unsqueeze_dim 2: [b, s, h, d]
    assert np.array_equal(xs, x.numpy())


@pytest.mark.parametrize("family", ["olmo2", "phi", "hunyuan_v1_dense", "hunyuan_v1_moe",
                                    "mistral4", "helium"])
def test_families_served_by_vllm_s_transformers_backend_are_checked(family: str) -> None:
    """OLMo 2, Phi (partial), HunYuan (q and k normalised after the rotation) and its MoE (the
    fused MoE needs vLLM's forward context), Mistral 4 (MLA, de-interleaving) and Helium (not
    in vLLM's registry: vLLM falls back to the backend) run through transformers' code inside
    vLLM."""
    pytest.importorskip("vllm")
    from posenc.conformance.sweeps.transformers_families import discover

    row = vllm_sweep.sweep(discover([family]), {})[0]
    assert row.verdict == "conforms", row.reason
    assert "Transformers modeling backend" in row.reason
    assert any(f.part == "wiring" for f in row.findings)


def test_positions_shifted_inside_vllm_s_transformers_backend_diverge(monkeypatch) -> None:
    pytest.importorskip("vllm")
    from transformers.models.olmo2 import modeling_olmo2

    from posenc.conformance.sweeps.transformers_families import discover

    forward = modeling_olmo2.Olmo2RotaryEmbedding.forward
    monkeypatch.setattr(modeling_olmo2.Olmo2RotaryEmbedding, "forward",
                        lambda self, x, position_ids: forward(self, x, position_ids + 1))
    row = vllm_sweep.sweep(discover(["olmo2"]), {})[0]
    assert row.verdict == "diverges", row.reason
    assert "positions off by +1" in row.reason, row.reason


def test_vllm_llama4_pairs_half_on_rows_its_loader_permutes() -> None:
    """The llama4 row's convention: vLLM's loader reorders each head's q/k rows
    (2i, 2i + 1) -> (i, i + d/2) and rotates neox-style (half); on the reordered weights that
    is the interleaved rotation transformers computes, features permuted alike for q and k."""
    from types import SimpleNamespace

    torch = pytest.importorskip("torch")
    llama4 = pytest.importorskip("vllm.model_executor.models.llama4")
    from .test_engine_sweeps import _rotate

    d, position, base = 16, 9, 500000.0
    owner = SimpleNamespace(config=SimpleNamespace(num_attention_heads=1, num_key_value_heads=1))
    _, rows = llama4.Llama4ForCausalLM.permute_qk_weight_for_rotary(
        owner, "model.layers.0.self_attn.q_proj.weight", torch.arange(d).reshape(d, 1).float())
    rows = rows.reshape(-1).long().numpy()
    assert rows.tolist() == [*range(0, d, 2), *range(1, d, 2)]
    rng = np.random.default_rng(5)
    q, k = rng.standard_normal((1, 1, 1, d)), rng.standard_normal((1, 1, 1, d))
    hf_q, hf_k = (_rotate(v, position, base=base, width=d, pairing="interleaved") for v in (q, k))
    vllm_q, vllm_k = (_rotate(v[..., rows], position, base=base, width=d) for v in (q, k))
    assert np.allclose(vllm_q, hf_q[..., rows]) and np.allclose(vllm_k, hf_k[..., rows])
    assert np.isclose(np.sum(vllm_q * vllm_k), np.sum(hf_q * hf_k))
