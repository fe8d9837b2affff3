"""Transforms of the per-layer rope schedules (``layer_schedule``: SmolLM3 and Llama 4 NoPE
flags, Gemma 3 and 4 sliding layers, Cohere2): flags inverted, the pattern off by one, the full
layers' values on the sliding ones."""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import Arrays, Reference, Transform, call, register


def _text(config: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """(the text config, a function putting a changed text config back into config)."""
    if "text_config" in config:
        return dict(config["text_config"]), lambda text: {**config, "text_config": text}
    return dict(config), lambda text: text


def _with_config(change: Any) -> Any:
    def apply(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
        text, put_back = _text(params["config"])
        return call(ref, inputs, {**params, "config": put_back(change(text))})
    return apply


def _inverted_flags(text: dict[str, Any]) -> dict[str, Any]:
    n = text["num_hidden_layers"]
    flags = text.get("no_rope_layers")
    if not flags:
        interval = text.get("no_rope_layer_interval", 4)
        flags = [int((i + 1) % interval != 0) for i in range(n)]
    if "no_rope_layers" not in text and "no_rope_layer_interval" not in text and text.get(
            "model_type", "") not in ("smollm3", "llama4_text", ""):
        return text  # a model without the flags (Gemma 3, Cohere2): nothing to invert
    return {**text, "no_rope_layers": [1 - int(f) for f in flags]}


def _pattern_off_by_one(text: dict[str, Any]) -> dict[str, Any]:
    if text.get("layer_types") or "no_rope_layers" in text:
        return text
    default = {"gemma3_text": 6, "cohere2": 4}.get(text.get("model_type", "gemma3_text"))
    if default is None:
        return text
    pattern = text.get("sliding_window_pattern", default)
    types = ["sliding_attention" if i % pattern else "full_attention"
             for i in range(text["num_hidden_layers"])]
    return {**text, "layer_types": types}


def _gemma3_copy(columns: tuple[int, ...]) -> Any:
    """Gemma 3's sliding rows take the full rows' values in ``columns``."""
    def apply(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
        out = np.array(call(ref, inputs, params))
        text, _ = _text(params["config"])
        if text.get("model_type", "gemma3_text") != "gemma3_text":
            return out
        full, sliding = out[:, 1] == 0, out[:, 1] == 1
        if full.any():
            for c in columns:
                out[sliding, c] = out[full][0, c]
        return out
    return apply


def _cohere2_rope_everywhere(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    out = np.array(call(ref, inputs, params))
    if params["config"].get("model_type") != "cohere2" or not out[:, 0].any():
        return out
    rope = out[out[:, 0] == 1][0]
    nope = out[:, 0] == 0
    out[nope, 0], out[nope, 2:] = 1.0, rope[2:]
    return out


def _gemma4_last_as_pattern(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    out = np.array(call(ref, inputs, params))
    text, _ = _text(params["config"])
    if text.get("model_type", "gemma4_text") != "gemma4_text":
        return out
    n = text["num_hidden_layers"]
    types = text.get("layer_types") or [
        "sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(n)]
    sliding = np.flatnonzero(out[:-1, 1] == 1)
    if types[-1] == "sliding_attention" and sliding.size:
        out[-1] = out[sliding[0]]
    return out


_CONFIG, _MODULE = ("config",), ("layer_schedule",)

register(
    no_rope_flags_inverted=Transform(
        "no_rope_layers inverted", _with_config(_inverted_flags),
        params=_CONFIG, modules=_MODULE),
    gemma3_scaling_on_sliding_layers=Transform(
        "the full layers' rope_scaling on the sliding layers", _gemma3_copy((2, 4)),
        params=_CONFIG, modules=_MODULE),
    gemma3_global_theta_on_sliding_layers=Transform(
        "rope_theta on the sliding layers", _gemma3_copy((3,)),
        params=_CONFIG, modules=_MODULE),
    sliding_pattern_off_by_one=Transform(
        "layer i full when i mod P = 0", _with_config(_pattern_off_by_one),
        params=_CONFIG, modules=_MODULE),
    gemma4_last_layer_as_pattern=Transform(
        "the last layer as the pattern says", _gemma4_last_as_pattern,
        params=_CONFIG, modules=_MODULE),
    cohere2_rope_on_every_layer=Transform(
        "rope on the global layers too", _cohere2_rope_everywhere,
        params=_CONFIG, modules=_MODULE),
)
