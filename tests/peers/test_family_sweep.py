"""``posenc sweep transformers`` (conformance/sweeps/transformers_sweep.py) and docs/families.md.

The judge is tested on synthetic observations whose rotations are written out here in
float64 (not with posenc), correct and with the bugs a port makes planted; the sweep itself
runs on a handful of representative families, whose expected verdicts and pairings are
what those models are known to compute (GPT-J and Cohere pair (2i, 2i+1), DeepSeek-V3
de-interleaves, GPT-NeoX rotates a quarter of each head ...), never read from a run. The
full sweep is `posenc sweep transformers` (docs/families.md says how long it takes).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest

from posenc.conformance.sweeps import transformers_sweep as family_sweep

from ..conftest import ROOT, run_cli

PREFILL = np.array([[1, 1, 0, 1, 2, 3], [0, 1, 2, 3, 4, 5]])
DECODE = np.array([[4], [6]])
PAGE = ROOT / "docs" / family_sweep.MARKDOWN


def _rotate(x: np.ndarray, positions: np.ndarray, *, base: float, width: int,
            pairing: str = "half") -> np.ndarray:
    """RoFormer's rotation of the first ``width`` features of x [b, h, s, d], by hand."""
    out = x.copy()
    half = width // 2
    for i in range(half):
        theta = base ** (-2.0 * i / width)
        a, b = (i, i + half) if pairing == "half" else (2 * i, 2 * i + 1)
        angle = positions[:, None, :] * theta
        c, s = np.cos(angle), np.sin(angle)
        out[..., a] = x[..., a] * c - x[..., b] * s
        out[..., b] = x[..., b] * c + x[..., a] * s
    return out


def _f32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32).astype(np.float64)


CONFIG = {"model_type": "synthetic", "vocab_size": 256, "hidden_size": 64, "num_attention_heads": 4,
          "head_dim": 16, "num_hidden_layers": 2, "max_position_embeddings": 64,
          "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                              "partial_rotary_factor": 0.5}}


def _observation(mutate: str = "") -> object:
    """A two-layer family with a half-rotary (8 of 16 features) rope of base 1e4, as a
    float32 implementation computes it, or with one bug planted."""
    from posenc.conformance.sweeps.transformers_families import Observation

    rng = np.random.default_rng(0)
    calls = []
    for phase, positions in (("prefill", PREFILL), ("decode", DECODE)):
        for layer in range(2):
            pairs = []
            for _ in range(2):  # q, k
                x = _f32(rng.standard_normal((2, 4, positions.shape[1], 16)))
                width, base, pos, pairing = 8, 10000.0, positions, "half"
                if mutate == "full width":
                    width = 16
                if mutate == "interleaved":
                    pairing = "interleaved"
                if mutate == "arange":
                    pos = np.broadcast_to(np.arange(positions.shape[1]), positions.shape)
                y = _rotate(x, pos, base=base, width=width, pairing=pairing)
                if mutate == "nope" and layer == 1:
                    y = x
                pairs.append((x, _f32(y)))
            calls.append({"function": "apply_rotary_pos_emb", "layer": layer, "phase": phase,
                          "pairs": pairs})
    positions = [0, 1, 7, 63, 64, 200, 4097]
    theta = 10000.0 ** (-np.arange(0, 8, 2) / 8.0)
    if mutate == "base":
        theta = 500000.0 ** (-np.arange(0, 8, 2) / 8.0)
    angles = (np.array(positions, dtype=np.float32)[:, None] * theta.astype(np.float32)
              ).astype(np.float32).astype(np.float64)
    table = {"layer_type": None, "positions": positions,
             "inv_freq": _f32(theta), "attention_scaling": 1.0,
             "cos": _f32(np.cos(np.concatenate([angles, angles], -1)))[None],
             "sin": _f32(np.sin(np.concatenate([angles, angles], -1)))[None]}
    return Observation("synthetic", config=dict(CONFIG), calls=calls, tables=[table],
                       layers=2, wiring="recorded apply_rotary_pos_emb")


def test_a_correct_family_conforms_with_its_pairing() -> None:
    verdict = family_sweep.judge(_observation())
    assert verdict.verdict == "conforms", verdict.reason
    assert verdict.profile == "conventional"  # float32 angles m·θ in the table
    assert verdict.pairing == "half"
    assert verdict.checked == ["frequencies", "wiring"]


def test_interleaved_pairs_are_a_convention_not_a_divergence() -> None:
    verdict = family_sweep.judge(_observation("interleaved"))
    assert (verdict.verdict, verdict.pairing) == ("conforms", "interleaved")


@pytest.mark.parametrize(("mutant", "diagnosis", "field"), [
    ("full width", "partial rotary width is ignored", "partial_rotary_factor"),
    ("arange", "positions ignored", "position_ids"),
    ("nope", "not rotated", "no_rope_layers"),
])
def test_a_planted_bug_diverges_with_its_diagnosis_and_field(mutant: str, diagnosis: str,
                                                             field: str) -> None:
    verdict = family_sweep.judge(_observation(mutant))
    assert verdict.verdict == "diverges"
    assert diagnosis in verdict.reason and field in verdict.reason, verdict.reason


def test_wrong_frequencies_diverge() -> None:
    verdict = family_sweep.judge(_observation("base"))
    assert verdict.verdict == "diverges"
    assert {f.what.split(" (")[0] for f in verdict.findings if f.grade is None} == {
        "all layers inv_freq", "all layers cos/sin"}


def test_rotation_by_minus_theta_is_named_as_a_mirrored_convention() -> None:
    """NanoChat's rotate_half has flipped signs: q rotated by -θ, which is posenc's rope at
    -positions (and equals the usual rope on q/k weights with each pair's members swapped)."""
    obs = _observation()
    for call in obs.calls:
        pos = PREFILL if call["phase"] == "prefill" else DECODE
        call["pairs"] = [(x, _f32(_rotate(x, -pos, base=10000.0, width=8)))
                         for x, _ in call["pairs"]]
    verdict = family_sweep.judge(obs)
    assert (verdict.verdict, verdict.pairing) == ("conforms", "half, mirrored")


def test_a_declared_pairing_is_held_to() -> None:
    """A config naming rope_interleave=True (DeepSeek) is held to the de-interleaved pairing:
    a family rotating in the half layout then diverges on that field."""
    obs = _observation()
    obs.config["rope_interleave"] = True
    verdict = family_sweep.judge(obs)
    assert verdict.verdict == "diverges" and "[rope_interleave]" in verdict.reason


def test_layers_without_attention_need_no_rotation_and_nope_layers_are_a_gap() -> None:
    obs = _observation()
    obs.config["layer_types"] = ["linear_attention", "full_attention"]
    obs.calls = [c for c in obs.calls if c["layer"] == 1]
    assert family_sweep.judge(obs).verdict == "conforms"  # a hybrid: no attention, no rope
    obs.config["layer_types"] = ["sliding_attention", "full_attention"]
    obs.calls = [dict(c, layer=0) for c in obs.calls]
    verdict = family_sweep.judge(obs)  # rope on sliding layers only: no rule in posenc
    assert verdict.verdict == "spec gap"
    assert "NoPE on the full_attention layers" in verdict.reason


def test_falcon_bias_is_slope_times_distance_rounded_to_bfloat16() -> None:
    """Independent float64 evidence for the Falcon row: Press et al.'s slopes for 12 heads
    written out here, slope·j rounded to bfloat16 by hand, equal to transformers' Falcon
    build_alibi_tensor bit for bit; the exact product differs by up to 2^-9 relative."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.models.falcon.modeling_falcon import build_alibi_tensor

    heads, k_len = 12, 7
    slopes = [2.0 ** (-8.0 * (i + 1) / 8) for i in range(8)]  # the closest power of two, 8
    slopes += [2.0 ** (-8.0 * (2 * i + 1) / 16) for i in range(4)]  # every other one of 16
    exact = np.array(slopes)[:, None] * np.arange(k_len)[None, :]
    rounded = torch.tensor(exact, dtype=torch.float32).bfloat16().double().numpy()
    got = build_alibi_tensor(torch.ones(1, k_len, dtype=torch.long), heads, torch.float32)
    got = got.reshape(heads, k_len).double().numpy()
    assert np.array_equal(got, rounded)
    assert 0 < np.max(np.abs(got - exact) / np.maximum(exact, 1e-30)) <= 2.0**-9
    assert family_sweep.ADJUDICATED[("falcon", "bfloat16")][0] == "documented convention"


def test_minimax_m3_vl_rotates_more_channels_than_its_rotary_dim() -> None:
    """Independent float64 evidence for the MiniMax-M3-VL row (docs/known-issues.md): with
    the config class's defaults the text rotary's frequencies are those of the whole 128-wide
    head, not of the documented rotary_dim = 64 channels."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.models.minimax_m3_vl.configuration_minimax_m3_vl import (
        MiniMaxM3VLTextConfig,
    )
    from transformers.models.minimax_m3_vl.modeling_minimax_m3_vl import (
        MiniMaxM3VLRotaryEmbedding,
    )

    config = MiniMaxM3VLTextConfig()
    base = float(config.rope_parameters["rope_theta"])
    assert (config.rotary_dim, config.head_dim) == (64, 128)
    inv_freq = MiniMaxM3VLRotaryEmbedding(config).inv_freq.double().numpy()
    documented = np.array([base ** (-2.0 * i / 64) for i in range(32)])
    whole_head = np.array([base ** (-2.0 * i / 128) for i in range(64)])
    assert inv_freq.shape != documented.shape
    assert np.allclose(inv_freq, whole_head, rtol=1e-6)
    assert family_sweep.ADJUDICATED[("minimax_m3_vl", "rotary_dim")][0] == "transformers bug"


def test_float32_error_past_what_float32_can_judge_is_not_judged() -> None:
    """A cos at angle 2^20 computed in float32 is off by up to ~0.06: the conventional
    profile's tolerance there is a fraction of the data, so the row is not judged at all."""
    angle = np.float32(2.0**20 + 0.3)
    got, want = np.cos(np.array([angle])).astype(np.float64), np.cos(np.array([2.0**20 + 0.3]))
    assert family_sweep.grade(got, want, scale=1.0, angle_bound=2.0**20)[2] is False
    assert family_sweep.grade(got, want, scale=1.0, angle_bound=8.0)[2] is True


# -- the representative families, for real ------------------------------------------------------
EXPECTED = {  # family: pairing (bias families: none)
    "llama": "half", "gptj": "interleaved", "gpt_neox": "half", "phi3": "half",
    "gemma3": "half", "qwen2_vl": "half", "deepseek_v3": "deinterleave",
    "cohere": "interleaved", "bloom": "", "t5": "",
}


@pytest.mark.slow
def test_the_representative_families_conform() -> None:
    """One test (not a fixture shared by several, which pytest-xdist would run once per
    worker): the ten families CI sweeps, in this process, about 15 s on two cores."""
    pytest.importorskip("transformers")
    start = time.perf_counter()
    verdicts = {v.family: v for v in family_sweep.sweep(family_sweep.REPRESENTATIVE,
                                                        isolated=False)}
    print(f"representative sweep: {time.perf_counter() - start:.1f} s")
    assert set(verdicts) == set(family_sweep.REPRESENTATIVE) == set(EXPECTED)
    for name, verdict in verdicts.items():
        assert verdict.verdict == "conforms", (name, verdict.reason)
        assert verdict.profile in ("exact", "conventional"), name
        assert verdict.pairing == EXPECTED[name], (name, verdict.pairing)
    for name in ("llama", "gptj", "gpt_neox", "gemma3", "deepseek_v3", "cohere"):
        assert verdicts[name].checked == ["frequencies", "wiring"], name
    assert verdicts["bloom"].checked == verdicts["t5"].checked == ["bias"]
    # Gemma 3: each layer type's own base, and the first global layer rotated in the decode
    whats = {f.what for f in verdicts["gemma3"].findings}
    assert {"sliding_attention inv_freq", "full_attention inv_freq"} <= whats
    assert any(w.startswith("layer 5 decode") for w in whats)


# transformers' own forward decides which layers rotate (each family's attention or model
# code, recorded per layer): rope on the sliding layers only (EXAONE 4, Lara-mini, Cohere2-MoE),
# by layer_rope_theta (Muse Spark), by no_rope_layers (Mistral Large 4)
NOPE_SCHEDULES = ("exaone4", "lara_mini", "muse_spark", "mistral_large4", "cohere2_moe")


@pytest.mark.slow
def test_nope_schedules_conform_layer_by_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    """posenc.layer_schedule's rules for families that leave layers unrotated: the rotated
    layers conform, and no layer posenc reads as NoPE was rotated; posenc's reader told to
    rotate every layer (the schedule ignored) makes the same families a gap naming the
    unrotated layers, so the verdict comes from what each layer did."""
    pytest.importorskip("transformers")
    import posenc

    verdicts = {v.family: v for v in family_sweep.sweep(NOPE_SCHEDULES, isolated=False)}
    for name in NOPE_SCHEDULES:
        verdict = verdicts[name]
        assert verdict.verdict == "conforms", (name, verdict.reason)
        assert "wiring" in verdict.checked, name
        # conforms: no layer posenc reads as NoPE rotated, no layer it reads as rotated left
        assert any(f.part == "wiring" and f.grade for f in verdict.findings), name
    schedule = posenc.layer_rope_parameters

    def inverted(config: dict) -> list:  # a port that reads the flags the wrong way round
        layers = schedule(config)
        rope = next(r for r in layers if r is not None)
        return [None if r is not None else rope for r in layers]

    monkeypatch.setattr(posenc, "layer_rope_parameters", inverted)
    for name in ("exaone4", "mistral_large4"):
        verdict = family_sweep.sweep([name], isolated=False)[0]
        assert verdict.verdict == "diverges", name
        assert "rotates a layer posenc reads as NoPE" in verdict.reason, name
    monkeypatch.setattr(posenc, "layer_rope_parameters",
                        lambda config: (_ for _ in ()).throw(posenc.ParameterError("none")))
    for name in ("exaone4", "muse_spark"):  # no schedule: every layer read as rotated
        verdict = family_sweep.sweep([name], isolated=False)[0]
        assert verdict.verdict == "spec gap" and "NoPE on the" in verdict.reason, name


UNROTATED = {"config_class": "SyntheticConfig", "layers": 2, "rotary_calls": 0,
             "apply_calls": 0, "wiring": "recorded apply_rotary_pos_emb"}


@pytest.mark.parametrize(("seen", "verdict"), [
    ({}, "no rope"),
    ({"rotary_calls": 1}, "not checkable"),  # a rotary module ran: not "no rope"
    ({"apply_calls": 2}, "not checkable"),  # apply_rotary* ran
    ({"wiring": "recorded apply_rotary_pos_emb; no KV cache returned"}, "not checkable"),
    ({"layers": 0}, "not checkable"),
])
def test_no_rope_only_when_the_text_model_ran_and_nothing_rotated(seen: dict,
                                                                   verdict: str) -> None:
    from posenc.conformance.sweeps.transformers_families import Observation

    obs = Observation("synthetic", unrotated={**UNROTATED, **seen})
    assert family_sweep.judge(obs).verdict == verdict


@pytest.mark.slow
def test_kimi_linear_applies_no_rope() -> None:
    """Kimi Linear's MLA carries a qk_rope_head_dim slice and no rotary class: its text
    model, run, rotates nothing (the model card: NoPE in its MLA layers)."""
    pytest.importorskip("transformers")
    verdict = family_sweep.sweep(["kimi_linear"], isolated=False)[0]
    assert verdict.verdict == "no rope", verdict.reason


# -- the page --------------------------------------------------------------------------------------
def test_families_page_is_fresh() -> None:
    """docs/families.md records a hash of the sweep's code and the transformers version it
    ran; this recomputes it without sweeping."""
    assert family_sweep.check(PAGE) is None, "docs/families.md is stale: run " \
        "`posenc sweep transformers`"
    text = PAGE.read_text(encoding="utf-8")
    version = family_sweep.recorded_version(text)
    assert version is not None
    assert family_sweep.recorded_hash(text) != family_sweep.inputs_hash(version + ".dev")


def test_the_page_hash_covers_every_sweep_module() -> None:
    """A module the sweep is split into outside the hashed lists would change the page's
    verdicts without making it stale."""
    modules = {p.name for p in (ROOT / "conformance" / "sweeps").glob("transformers_*.py")}
    assert modules == set(family_sweep.SWEEP_MODULES) | set(family_sweep.OBSERVER_MODULES)


def test_the_page_covers_150_families_with_a_verdict_each() -> None:
    rows = [line for line in PAGE.read_text(encoding="utf-8").splitlines()
            if line.startswith("| `")]
    cells = [re.split(r"(?<!\\)\|", row) for row in rows]  # "\|" is a pipe inside a cell
    verdicts = [c[2].strip() for c in cells]
    assert len(rows) >= 150
    assert set(verdicts) <= {"conforms", "diverges", "not checkable", "spec gap", "no rope"}
    for c in cells:
        if c[2].strip() != "conforms":
            assert c[7].strip(), c  # every divergence, gap and uncheckable family says why



# -- the command ----------------------------------------------------------------------------------
def test_an_unknown_family_is_an_error_naming_it() -> None:
    pytest.importorskip("transformers")
    done = run_cli("sweep", "transformers", "--family", "no_such_family")
    assert done.returncode == 2
    assert "no_such_family" in done.stderr


def test_check_reports_a_missing_page(tmp_path: Path) -> None:
    done = run_cli("sweep", "transformers", "--check", "--out", str(tmp_path))
    assert done.returncode == 1 and "missing" in done.stdout


@pytest.mark.parametrize("model_type", ["dory", "lfm3", "gemma4", "mistral4"])
def test_the_sweep_reads_layers_through_posencs_reader(model_type: str) -> None:
    """The sweep adjusts nothing posenc's reader reads itself (Gemma 4's per_layer_config,
    Mistral 4's factor, LFM3's conv layers); Dory's (attention, mlp) block list maps one
    layer per attention block, as DoryConfig reads it."""
    pytest.importorskip("transformers")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from posenc.conformance.sweeps.transformers_reading import expected_layers

    config = CONFIG_MAPPING[model_type]()
    text = getattr(config, "text_config", None) or config
    n = text.num_hidden_layers
    layers, notes = expected_layers(config.to_dict().get("text_config") or config.to_dict(), n)
    assert len(layers) == n
    types = getattr(text, "layer_types", None) or ["all"] * n
    for layer, layer_type in zip(layers, types, strict=True):
        assert layer.layer_type in (layer_type, "all")
        assert (layer.scaling is None) is (layer_type == "conv")
    assert all("dropped" not in note and "per_layer_config" not in note for note in notes)
    if model_type == "gemma4":
        widths = {layer.layer_type: layer.head_dim for layer in layers}
        assert widths == {"full_attention": 512, "sliding_attention": 256}
    if model_type == "mistral4":
        assert {layer.head_dim for layer in layers} == {64}
        assert all("partial_rotary_factor" not in layer.scaling for layer in layers)
