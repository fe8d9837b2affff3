"""One rope configuration, many dialects: a transformers config translated into vLLM's
``get_rope`` arguments, llama.cpp / ggml rope parameters and ONNX ``RotaryEmbedding`` inputs,
and back where the mapping is invertible. The semantics of each target are posenc encodings
or references (``ggml_rope``; vLLM's divergences in :mod:`.vllm`), so a translation is checked
by computing both sides."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ParameterError
from .ggml import freq_factors_summary, from_ggml, to_ggml
from .onnx import to_onnx
from .transformers import ALL_LAYERS, RopeLayer, rope_layers
from .vllm import DIVERGENCES, VLLM_VERSION, from_vllm, to_vllm

__all__ = [
    "ALL_LAYERS",
    "DIVERGENCES",
    "TARGETS",
    "VLLM_VERSION",
    "RopeLayer",
    "freq_factors_summary",
    "from_ggml",
    "from_vllm",
    "rope_layers",
    "to_ggml",
    "to_onnx",
    "to_vllm",
    "translate",
]

TARGETS = ("vllm", "ggml", "onnx", "transformers")
OPTIONS = {"vllm": (), "ggml": ("mode", "n_ctx"), "onnx": ("max_positions", "seq_len"),
           "transformers": ()}


def translate(config: Mapping[str, Any], to: str, **options: Any) -> dict[str, Any]:
    """``{layer_type: target parameters}`` for a transformers config dict (``'all'`` when one
    rope serves every layer). ``options`` go to the target: ``mode``/``n_ctx`` (ggml),
    ``max_positions``/``seq_len`` (onnx)."""
    if not isinstance(to, str) or to not in TARGETS:
        raise ParameterError(f"to={to!r} is not one of {', '.join(map(repr, TARGETS))}")
    for name in options:
        if name not in OPTIONS[to]:
            takes = f"takes {', '.join(OPTIONS[to])}" if OPTIONS[to] else "takes no options"
            raise ParameterError(f"{name}={options[name]!r} does not apply to to={to!r} (it "
                                 f"{takes}): an option is never ignored")
    layers = rope_layers(config)
    if to == "vllm":
        return {t: to_vllm(layer, **options) for t, layer in layers.items()}
    if to == "ggml":
        return {t: to_ggml(layer, **options) for t, layer in layers.items()}
    if to == "onnx":
        return {t: to_onnx(layer, **options) for t, layer in layers.items()}
    return {t: dict(layer.scaling) for t, layer in layers.items()}
