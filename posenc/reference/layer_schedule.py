"""Which layers of a model get which rope, read from a transformers config dict the way
transformers 5.x's config classes and modeling code read it (Gemma 3, Cohere2, SmolLM3,
Llama 4). One row per layer: has_rope, local (sliding or chunked attention), the schedule's
index in rope_frequencies' list (dynamic with an alpha counting as ntk_alpha), rope_theta,
factor (0 for the last three on a NoPE layer)."""

from __future__ import annotations

import numpy as np

from ..rotary.schedules import kind

SCHEDULES = ("default", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope", "proportional",
             "ntk_alpha")
DEFAULT_THETA = {"cohere2": 10000.0, "smollm3": 2000000.0, "llama4_text": 500000.0}


def _text(config):
    if config["model_type"] in ("gemma3", "gemma4", "llama4") and "text_config" in config:
        text = dict(config["text_config"])
        text.setdefault("model_type", config["model_type"] + "_text")
        return text
    return config


def _flat_rope(config, default_theta):
    """PreTrainedConfig.convert_rope_params_to_dict: rope_scaling, else rope_parameters."""
    params = dict(config.get("rope_scaling") or config.get("rope_parameters") or {})
    params.setdefault("rope_type", params.get("type", "default"))
    params.setdefault("rope_theta", config.get("rope_theta", default_theta))
    return params


def _gemma3(config, n):
    pattern = config.get("sliding_window_pattern", 6)
    types = config.get("layer_types") or [
        "sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
    nested = config.get("rope_parameters") or {}
    full = dict(nested.get("full_attention") or {"rope_type": "default"})
    full.update(config.get("rope_scaling") or {})
    full.setdefault("rope_theta", config.get("rope_theta", 1000000.0))
    sliding = dict(nested.get("sliding_attention") or {"rope_type": "default"})
    sliding.setdefault("rope_theta", config.get("rope_local_base_freq", 10000.0))
    by_type = {"full_attention": full, "sliding_attention": sliding}
    return [(by_type[t], t == "sliding_attention") for t in types]


def _gemma4(config, n):
    types = list(config.get("layer_types") or [
        "sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(n)])
    types[-1] = "full_attention"  # Gemma4TextConfig forces the last layer global
    nested = config.get("rope_parameters") or {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                           "rope_theta": 1000000.0}}
    return [(nested[t], t == "sliding_attention") for t in types]


def _cohere2(config, n):
    pattern = config.get("sliding_window_pattern", 4)
    types = config.get("layer_types") or [
        "sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
    rope = _flat_rope(config, DEFAULT_THETA["cohere2"])
    return [(rope if t == "sliding_attention" else None, t == "sliding_attention")
            for t in types]


def _no_rope_flags(config, n, empty_means_default):
    flags = config.get("no_rope_layers")
    if flags is None or (empty_means_default and not flags):
        interval = config.get("no_rope_layer_interval", 4)
        flags = [int((i + 1) % interval != 0) for i in range(n)]
    return flags


def _smollm3(config, n):
    flags = _no_rope_flags(config, n, empty_means_default=False)
    types = config.get("layer_types")
    if not types:
        sliding = config.get("use_sliding_window", False) and config.get("sliding_window")
        types = ["sliding_attention" if sliding and not flags[i] else "full_attention"
                 for i in range(n)]
    rope = _flat_rope(config, DEFAULT_THETA["smollm3"])
    return [(rope if flags[i] else None, types[i] == "sliding_attention") for i in range(n)]


def _llama4(config, n):
    flags = _no_rope_flags(config, n, empty_means_default=True)  # 1: the layer HAS rope
    types = config.get("layer_types")
    if not types:
        chunked = config.get("attention_chunk_size", 8192) is not None
        types = ["chunked_attention" if flags[i] and chunked else "full_attention"
                 for i in range(n)]
    rope = _flat_rope(config, DEFAULT_THETA["llama4_text"])
    return [(rope if flags[i] else None, types[i] != "full_attention") for i in range(n)]


def _rope_when(config, predicate):
    """The flat rope on each layer i whose layer type t satisfies predicate(i, t)."""
    rope = _flat_rope(config, None)
    return [(rope if predicate(i, t) else None, t == "sliding_attention")
            for i, t in enumerate(config["layer_types"])]


def _afmoe(config, n):  # also Lara-mini: position embeddings reach sliding layers only
    return _rope_when(config, lambda i, t: t == "sliding_attention")


def _flint(config, n):  # FlintAttention rotates while its sliding_window is not None
    window = config.get("sliding_window")
    return _rope_when(config, lambda i, t: t == "sliding_attention" and window is not None)


def _exaone4(config, n):  # Exaone4Attention: sliding_window None or a sliding layer
    window = config.get("sliding_window")
    return _rope_when(config, lambda i, t: window is None or t == "sliding_attention")


def _cohere2_moe(config, n):  # sliding, or force_rope on dense layers with pattern 1
    force = config.get("prefix_dense_sliding_window_pattern", 1) == 1
    mlp = config["mlp_layer_types"]
    return _rope_when(config, lambda i, t: t == "sliding_attention" or (
        force and mlp[i] == "dense"))


def _muse(config, n):  # layer_rope_theta[i] == 0: the model passes no position embeddings
    base = _flat_rope(config, None)
    thetas = config.get("layer_rope_theta") or [
        0 if (n - 1 - i) % 4 == 0 else base["rope_theta"] for i in range(n)]
    types = config.get("layer_types") or ["full_attention"] * n
    return [(dict(base, rope_theta=thetas[i]) if thetas[i] else None,
             types[i] == "sliding_attention") for i in range(n)]


def _mistral_large4(config, n):  # SmolLM3's no_rope_layers (1: rope); indexed attention
    flags = _no_rope_flags(config, n, empty_means_default=False)
    rope = _flat_rope(config, None)
    return [(rope if flags[i] else None, False) for i in range(n)]


RULES = {"gemma3_text": _gemma3, "gemma4_text": _gemma4, "cohere2": _cohere2, "smollm3": _smollm3,
         "llama4_text": _llama4, "afmoe": _afmoe, "lara_mini": _afmoe, "flint": _flint,
         "exaone4": _exaone4, "exaone_moe": _exaone4, "kolibri1": _exaone4,
         "cohere2_moe": _cohere2_moe, "muse_glimmer_text": _muse, "muse_spark_text": _muse,
         "mistral_large4_text": _mistral_large4}


def layer_schedule(*, config):
    config = _text(config)
    n = config["num_hidden_layers"]
    layers = RULES[config["model_type"]](config, n)
    out = np.zeros((n, 5))
    for i, (rope, local) in enumerate(layers):
        out[i, 1] = float(local)
        if rope is not None:
            out[i] = [1.0, float(local), SCHEDULES.index(kind(rope)),
                      rope["rope_theta"], rope.get("factor") or 1.0]
    return out
