"""Published rope configurations of named models, as the transformers config.json fields that
posenc's translation reads (each entry cites the model card's config.json). Used by the
translation goldens (spec/ggml_rope.yaml) and the CLI (``posenc translate --named``)."""

from __future__ import annotations

from typing import Any

_PHI35_LONG = [
    1.0800000429153442, 1.1100000143051147, 1.1399999856948853, 1.340000033378601,
    1.5899999141693115, 1.600000023841858, 1.6200000047683716, 2.620000123977661,
    3.2300000190734863, 3.2300000190734863, 4.789999961853027, 7.400000095367432,
    7.700000286102295, 9.09000015258789, 12.199999809265137, 17.670000076293945,
    24.46000099182129, 28.57000160217285, 30.420001983642578, 30.840002059936523,
    32.590003967285156, 32.93000411987305, 42.320003509521484, 44.96000289916992,
    50.340003967285156, 50.45000457763672, 57.55000305175781, 57.93000411987305,
    58.21000289916992, 60.1400032043457, 62.61000442504883, 62.62000274658203, 62.71000289916992,
    63.1400032043457, 63.1400032043457, 63.77000427246094, 63.93000411987305, 63.96000289916992,
    63.970001220703125, 64.02999877929688, 64.06999969482422, 64.08000183105469,
    64.12000274658203, 64.41000366210938, 64.4800033569336, 64.51000213623047, 64.52999877929688,
    64.83999633789062,
]
_PHI35_SHORT = [
    1.0, 1.0199999809265137, 1.0299999713897705, 1.0299999713897705, 1.0499999523162842,
    1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.0499999523162842,
    1.0699999332427979, 1.0999999046325684, 1.1099998950958252, 1.1599998474121094,
    1.1599998474121094, 1.1699998378753662, 1.2899998426437378, 1.339999794960022,
    1.679999828338623, 1.7899998426437378, 1.8199998140335083, 1.8499997854232788,
    1.8799997568130493, 1.9099997282028198, 1.9399996995925903, 1.9899996519088745,
    2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346,
    2.0199997425079346, 2.0199997425079346, 2.0299997329711914, 2.0299997329711914,
    2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
    2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0799996852874756,
    2.0899996757507324, 2.189999580383301, 2.2199995517730713, 2.5899994373321533,
    2.729999542236328, 2.749999523162842, 2.8399994373321533,
]

_PHI4_MINI_LONG = [
    1.0, 1.118320672, 1.250641126, 1.398617824, 1.564103225, 1.74916897, 1.956131817, 2.187582649,
    2.446418898, 2.735880826, 3.059592084, 3.421605075, 3.826451687, 4.279200023, 4.785517845,
    5.351743533, 5.984965424, 6.693110555, 7.485043894, 8.370679318, 9.36110372, 10.4687158,
    11.70738129, 13.09260651, 14.64173252, 16.37415215, 18.31155283, 20.47818807, 22.90118105,
    25.61086418, 28.64115884, 32.03, 32.1, 32.13, 32.23, 32.6, 32.61, 32.64, 32.66, 32.7, 32.71,
    32.93, 32.97, 33.28, 33.49, 33.5, 44.16, 47.77,
]

NAMED: dict[str, dict[str, Any]] = {
    # https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json
    "llama-3.1-8b": {
        "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
        "max_position_embeddings": 131072, "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
    # https://huggingface.co/google/gemma-3-4b-it/blob/main/config.json (text_config), in
    # transformers 5's layer-keyed rope_parameters (rope_local_base_freq -> sliding_attention)
    "gemma-3-4b": {
        "head_dim": 256, "num_attention_heads": 8, "num_key_value_heads": 4,
        "max_position_embeddings": 131072,
        "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}}},
    # https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json
    "gpt-oss-20b": {
        "head_dim": 64, "num_attention_heads": 64, "num_key_value_heads": 8,
        "max_position_embeddings": 131072, "rope_theta": 150000.0,
        "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                         "beta_slow": 1.0, "truncate": False,
                         "original_max_position_embeddings": 4096}},
    # https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json
    "deepseek-v3": {
        "hidden_size": 7168, "num_attention_heads": 128, "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128, "max_position_embeddings": 163840, "rope_theta": 10000.0,
        "rope_scaling": {"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1,
                         "mscale": 1.0, "mscale_all_dim": 1.0,
                         "original_max_position_embeddings": 4096}},
    # https://huggingface.co/microsoft/Phi-3.5-mini-instruct/blob/main/config.json (48 long and
    # 48 short factors compared value by value with a verbatim copy of that config.json;
    # original_max_position_embeddings sits beside rope_scaling there, as here)
    "phi-3.5-mini": {
        "hidden_size": 3072, "num_attention_heads": 32, "num_key_value_heads": 32,
        "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
        "rope_theta": 10000.0,
        "rope_scaling": {"type": "longrope", "long_factor": _PHI35_LONG,
                         "short_factor": _PHI35_SHORT}},
    # https://huggingface.co/microsoft/Phi-4-mini-instruct/blob/main/config.json (partial
    # rotary: 96 of 128 features; short factors all 1)
    "phi-4-mini": {
        "hidden_size": 3072, "num_attention_heads": 24, "num_key_value_heads": 8,
        "max_position_embeddings": 131072, "partial_rotary_factor": 0.75,
        "rope_theta": 10000.0,
        "rope_scaling": {"type": "longrope", "long_factor": _PHI4_MINI_LONG,
                         "short_factor": [1.0] * 48,
                         "original_max_position_embeddings": 4096}},
    # https://huggingface.co/Qwen/Qwen2.5-VL-7B-Instruct/blob/main/config.json
    "qwen2.5-vl-7b": {
        "hidden_size": 3584, "num_attention_heads": 28, "max_position_embeddings": 128000,
        "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}},
    # https://huggingface.co/mistralai/Ministral-8B-Instruct-2410/blob/main/config.json
    "ministral-8b": {
        "head_dim": 128, "hidden_size": 4096, "num_attention_heads": 32,
        "max_position_embeddings": 32768, "rope_theta": 100000000.0},
    # https://huggingface.co/google/gemma-4-31B-it/blob/main/config.json (text_config): sliding
    # layers 256-wide heads, full layers global_head_dim 512 with proportional rope (a quarter
    # of the pairs rotate); the same rope_parameters as transformers' Gemma4TextConfig defaults
    "gemma-4-31b": {
        "head_dim": 256, "global_head_dim": 512, "hidden_size": 5376,
        "num_attention_heads": 32, "num_key_value_heads": 16, "num_global_key_value_heads": 4,
        "max_position_embeddings": 262144,
        "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 10,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                               "rope_theta": 1000000.0}}},
    # https://huggingface.co/mistralai/Ministral-3-8B-Instruct-2512/blob/main/config.json
    # (text_config; the values transformers' Ministral3Config defaults to): YaRN 16 over 16384
    # trained positions, mscale = mscale_all_dim (attention factor 1), and Llama 4's query
    # temperature llama_4_scaling_beta, which is not part of the rope
    "ministral-3-8b": {
        "head_dim": 128, "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "max_position_embeddings": 262144,
        "rope_parameters": {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 16.0,
                            "original_max_position_embeddings": 16384, "beta_fast": 32.0,
                            "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                            "llama_4_scaling_beta": 0.1}},
}
