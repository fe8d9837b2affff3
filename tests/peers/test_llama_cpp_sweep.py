"""``posenc sweep llama.cpp`` without the engine: llama_model_rope_type and the architecture name
table parsed from C++ excerpts written here, the GGUF metadata mapped to ggml_rope_ext's
arguments as llama.cpp's load_hparams maps them, and a ggml rope, correct or broken, through
the sweep's judge (where ggml-python is installed)."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.conformance.sweeps import llama_cpp_source as source
from posenc.errors import ParameterError

MODEL_CPP = """
static int unrelated() { return 0; }
llama_rope_type llama_model_rope_type(const llama_model * model) {
    switch (model->arch) {
        // no rope
        case LLM_ARCH_GPT2:
        case LLM_ARCH_MPT:
            return LLAMA_ROPE_TYPE_NONE;
        case LLM_ARCH_LLAMA:
        case LLM_ARCH_DECI:
            return LLAMA_ROPE_TYPE_NORM;
        case LLM_ARCH_QWEN2:
            return LLAMA_ROPE_TYPE_NEOX;
        case LLM_ARCH_GLM4:
            return model->hparams.use_mrope() ? LLAMA_ROPE_TYPE_MROPE : LLAMA_ROPE_TYPE_NORM;
        case LLM_ARCH_DFLASH:
            if (const auto & s = model->hparams.rope_sections; s[0] || s[1]) {
                return LLAMA_ROPE_TYPE_MROPE;
            }
            return model->hparams.dsv4_hc_mult > 0 ? LLAMA_ROPE_TYPE_NORM : LLAMA_ROPE_TYPE_NEOX;
        case LLM_ARCH_QWEN3VL:
            return LLAMA_ROPE_TYPE_IMROPE;
        case LLM_ARCH_UNKNOWN:
            GGML_ABORT("unknown architecture");
    }
    return LLAMA_ROPE_TYPE_NONE;
}
"""
ARCH_CPP = """
static const std::map<llm_arch, const char *> LLM_ARCH_NAMES = {
    { LLM_ARCH_LLAMA,            "llama"            },
    { LLM_ARCH_QWEN2,            "qwen2"            },
    { LLM_ARCH_GLM4,             "glm4"             },
    { LLM_ARCH_GPT2,             "gpt2"             },
};
static const std::map<llm_kv, const char *> LLM_KV_NAMES = {
    { LLM_KV_GENERAL_TYPE, "general.type" },
};
"""


def test_rope_types_are_read_per_case_group() -> None:
    types = source.rope_types(MODEL_CPP)
    assert types["LLM_ARCH_LLAMA"] == types["LLM_ARCH_DECI"] == ("NORM", "NORM")
    assert types["LLM_ARCH_GPT2"] == types["LLM_ARCH_MPT"] == ("NONE", "NONE")
    assert types["LLM_ARCH_QWEN2"] == ("NEOX", "NEOX")
    assert types["LLM_ARCH_GLM4"] == ("MROPE", "NORM")
    assert types["LLM_ARCH_DFLASH"] == ("NEOX", "NEOX")  # the fallthrough of its rules
    assert types["LLM_ARCH_QWEN3VL"] == ("IMROPE", "IMROPE")
    assert "LLM_ARCH_UNKNOWN" not in types


def test_the_name_table_and_the_mode_per_gguf_architecture() -> None:
    names = source.arch_names(ARCH_CPP)
    assert names == {"llama": "LLM_ARCH_LLAMA", "qwen2": "LLM_ARCH_QWEN2",
                     "glm4": "LLM_ARCH_GLM4", "gpt2": "LLM_ARCH_GPT2"}
    types = source.rope_types(MODEL_CPP)
    assert source.rope_mode("llama", types, names, None) == "normal"
    assert source.rope_mode("qwen2", types, names, None) == "neox"
    assert source.rope_mode("gpt2", types, names, None) is None
    assert source.rope_mode("glm4", types, names, [8, 4, 4, 0]) == "mrope"
    assert source.rope_mode("glm4", types, names, [0, 0, 0, 0]) == "normal"
    with pytest.raises(ParameterError, match="'falcon'"):
        source.rope_mode("falcon", types, names, None)


def test_sources_without_the_function_or_table_are_refused() -> None:
    with pytest.raises(ParameterError, match="llama_model_rope_type"):
        source.rope_types("int main() { return 0; }")
    with pytest.raises(ParameterError, match="LLM_ARCH_NAMES"):
        source.arch_names("int main() { return 0; }")


def test_default_metadata_gives_llama_cpps_defaults() -> None:
    """load_hparams: base 10000, no scaling (freq_scale 1), n_rot the head size, n_ctx_orig the
    training context."""
    p = source.ggml_parameters({"general.architecture": "qwen2", "qwen2.context_length": 512},
                               64)
    assert (p["n_dims"], p["freq_base"], p["freq_scale"], p["ext_factor"], p["attn_factor"],
            p["n_ctx_orig"], p["sections"]) == (64, 10000.0, 1.0, 0.0, 1.0, 512, None)


def test_scaling_metadata_maps_as_load_hparams_reads_it() -> None:
    meta = {"general.architecture": "a", "a.context_length": 131072,
            "a.rope.dimension_count": 32, "a.rope.freq_base": 150000.0,
            "a.rope.freq_base_swa": 10000.0, "a.rope.scaling.type": "yarn",
            "a.rope.scaling.factor": 32.0, "a.rope.scaling.original_context_length": 4096,
            "a.rope.scaling.yarn_beta_fast": 16.0, "a.rope.dimension_sections": [4, 6, 6, 0]}
    p = source.ggml_parameters(meta, 64)
    assert (p["n_dims"], p["freq_base"], p["freq_scale"], p["ext_factor"], p["n_ctx_orig"],
            p["beta_fast"], p["beta_slow"], p["sections"]) == (32, 150000.0, 1 / 32, 1.0, 4096,
                                                               16.0, 1.0, [4, 6, 6, 0])
    assert source.ggml_parameters(meta, 64, swa=True)["freq_base"] == 10000.0
    linear = source.ggml_parameters({"general.architecture": "a", "a.rope.scaling.type":
                                     "linear", "a.rope.scaling.factor": 4.0}, 16)
    assert (linear["freq_scale"], linear["ext_factor"]) == (0.25, 0.0)
    with pytest.raises(ParameterError, match=r"general\.architecture"):
        source.ggml_parameters({}, 16)


def _rotate_half(x: np.ndarray, start: int, base: float) -> np.ndarray:
    """RoFormer's half-split rotation of x [b, h, s, d] at start, start + 1, ... by hand."""
    d = x.shape[-1]
    pos = start + np.arange(x.shape[2], dtype=np.float64)[:, None]
    angle = pos * base ** (-2.0 * np.arange(d // 2) / d)
    a, b = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([a * np.cos(angle) - b * np.sin(angle),
                           b * np.cos(angle) + a * np.sin(angle)], -1)


@pytest.mark.parametrize(("rows", "verdict"), [("permuted", "conforms"),
                                                ("as transformers", "diverges")])
def test_normal_mode_on_the_converters_rows_is_transformers_half_rotation(rows: str,
                                                                          verdict: str) -> None:
    """The converter writes q/k rows (i, i + d/2) -> (2i, 2i + 1) for llama; ggml's normal mode
    on those rows is transformers' half rotation. Without the reordering the sweep must report
    the pairing, not absolve it."""
    pytest.importorskip("ggml")
    from posenc.conformance.sweeps import llama_cpp, mlx_lm

    d, base = 16, 10000.0
    order = [r for i in range(d // 2) for r in (i, i + d // 2)] if rows == "permuted" else None
    params = {"n_dims": d, "freq_base": base, "freq_scale": 1.0, "ext_factor": 0.0,
              "attn_factor": 1.0, "beta_fast": 32.0, "beta_slow": 1.0, "n_ctx_orig": 64,
              "sections": None}
    applied = llama_cpp._apply("normal", params, {}, d, [100, 63, 64, 65], order)
    for call in applied:  # the float64 truth written here, not posenc's
        want = _rotate_half(call["x"], int(call["offset"][0]), base)
        assert (np.max(np.abs(call["y"] - want)) < 1e-4) == (rows == "permuted")
    config = {"model_type": "t", "hidden_size": 32, "num_attention_heads": 2, "head_dim": d,
              "num_hidden_layers": 1, "max_position_embeddings": 64,
              "rope_parameters": {"rope_type": "default", "rope_theta": base}}
    obs = {"model_type": "t", "config": config, "layers": 1, "forward": "ggml", "calls": [],
           "applied": [dict(c, layer=0) for c in applied]}
    row = mlx_lm.judge("t", obs, ("half",))
    assert row.verdict == verdict, row.reason
    if verdict == "diverges":
        assert "pairs as 'interleaved'" in row.reason
