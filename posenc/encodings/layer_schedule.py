"""Layer schedules: which layers of a model get which rope, from a transformers config dict
(Gemma 3, Gemma 4, Cohere2, SmolLM3, Llama 4), as transformers 5.x's config classes and modeling code
read it. ``layer_rope_parameters`` gives the per-layer rope dicts (None for a NoPE layer);
``layer_schedule`` encodes them as one array for the conformance harness."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .. import array_api, params
from ..errors import ParameterError, Unsupported
from .rope_frequencies import SCHEDULES

__all__ = ["layer_rope_parameters", "layer_schedule"]

# rope_theta when a config names none (the config classes' default_theta)
_DEFAULT_THETA = {"cohere2": 10000.0, "smollm3": 2000000.0, "llama4_text": 500000.0}
_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")
COLUMNS = ("has_rope", "local", "schedule", "rope_theta", "factor")


def _int(key: str, value: Any, *, minimum: int) -> int:
    return params.count(f"config[{key!r}]", value, minimum=minimum, must_be=f"an int >= {minimum}")


def _required(config: Mapping[str, Any], key: str, model: str) -> Any:
    if key not in config:
        raise ParameterError(f"config has no {key!r}: the {model} schedule needs it "
                             f"(keys: {sorted(config)})")
    return config[key]


def _text_config(config: Any) -> Mapping[str, Any]:
    if not isinstance(config, Mapping):
        raise ParameterError(f"config={config!r} must be a dict (a transformers config's "
                             "to_dict())")
    model = _required(config, "model_type", "layer")
    if not isinstance(model, str):
        raise ParameterError(f"config['model_type']={model!r} must be a string")
    if model in ("gemma3", "gemma4", "llama4") and "text_config" in config:
        text = config["text_config"]
        if not isinstance(text, Mapping):
            raise ParameterError(f"config['text_config']={text!r} must be a dict")
        return {"model_type": f"{model}_text", **text}
    if model not in _RULES:
        raise ParameterError(f"config['model_type']={model!r} has no layer schedule (known: "
                             f"{', '.join(sorted(_RULES))}; gemma3, gemma4 and llama4 with text_config)")
    return config


def _layer_types(config: Mapping[str, Any], n: int,
                 known: tuple[str, ...] = _LAYER_TYPES) -> list[str] | None:
    types = config.get("layer_types")
    if not types:
        return None
    if not isinstance(types, Sequence) or isinstance(types, str) or len(types) != n:
        raise ParameterError(f"config['layer_types']={types!r} must list one type per layer "
                             f"(num_hidden_layers={n})")
    for i, t in enumerate(types):
        if t not in known:
            raise ParameterError(f"config['layer_types'][{i}]={t!r} is not one of "
                                 f"{list(known)}")
    return list(types)


def _pattern_types(config: Mapping[str, Any], n: int, default: int) -> list[str]:
    types = _layer_types(config, n)
    if types is not None:
        return types
    pattern = _int("sliding_window_pattern", config.get("sliding_window_pattern", default),
                   minimum=1)
    return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]


def _rope_dict(key: str, value: Any, theta: float) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ParameterError(f"config[{key!r}]={value!r} must be a dict")
    rope = dict(value)
    rope.setdefault("rope_type", rope.get("type", "default"))
    if rope["rope_type"] not in SCHEDULES:
        raise ParameterError(f"config[{key!r}]['rope_type']={rope['rope_type']!r} is not one "
                             f"of {list(SCHEDULES)}")
    rope.setdefault("rope_theta", theta)
    theta = rope["rope_theta"]
    if isinstance(theta, bool) or not isinstance(theta, int | float) or theta <= 1:
        raise ParameterError(f"config[{key!r}]['rope_theta']={theta!r} must be a number > 1")
    factor = rope.get("factor")
    if factor is not None and (isinstance(factor, bool) or not isinstance(factor, int | float)):
        raise ParameterError(f"config[{key!r}]['factor']={factor!r} must be a number")
    return rope


def _schedule_name(rope: Mapping[str, Any]) -> str:
    """The schedule rope_frequencies runs: Hunyuan's dynamic with an alpha is ntk_alpha."""
    if rope["rope_type"] == "dynamic" and rope.get("alpha"):
        return "ntk_alpha"
    return rope["rope_type"]


def _flat_rope(config: Mapping[str, Any]) -> dict[str, Any]:
    """One rope dict for every rotary layer (PreTrainedConfig.convert_rope_params_to_dict):
    rope_scaling, else rope_parameters, rope_theta beside them, else the model's default."""
    key = "rope_scaling" if config.get("rope_scaling") else "rope_parameters"
    theta = config.get("rope_theta", _DEFAULT_THETA.get(config["model_type"]))
    return _rope_dict(key, config.get(key) or {}, theta)


def _gemma3(config: Mapping[str, Any], n: int) -> list[tuple[dict[str, Any] | None, bool]]:
    """Every layer has rope: sliding ones rope_local_base_freq (1e4) unscaled, full ones
    rope_theta (1e6) with rope_scaling (Gemma3TextConfig.convert_rope_params_to_dict)."""
    types = _pattern_types(config, n, default=6)
    nested = config.get("rope_parameters") or {}
    if not isinstance(nested, Mapping) or (nested and not set(nested) & {
            "full_attention", "sliding_attention"}):
        raise ParameterError(f"config['rope_parameters']={nested!r}: Gemma 3 nests them by "
                             "layer type ({'full_attention': {...}, 'sliding_attention': {...}})")
    full = dict(nested.get("full_attention") or {"rope_type": "default"})
    full.update(config.get("rope_scaling") or {})
    full = _rope_dict("rope_parameters.full_attention", full,
                      config.get("rope_theta", 1000000.0))
    sliding = _rope_dict("rope_parameters.sliding_attention",
                         nested.get("sliding_attention") or {"rope_type": "default"},
                         config.get("rope_local_base_freq", 10000.0))
    return [(full if t == "full_attention" else sliding, t == "sliding_attention")
            for t in types]


_GEMMA4_ROPE = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                       "rope_theta": 1000000.0},
}


def _gemma4(config: Mapping[str, Any], n: int) -> list[tuple[dict[str, Any] | None, bool]]:
    """Every layer has rope: sliding ones default at 1e4, full ones proportional with
    partial_rotary_factor 0.25 at 1e6 (Gemma4TextConfig's defaults); the last layer is forced
    full, even when layer_types say otherwise."""
    types = _layer_types(config, n) or [
        "sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(n)]
    types[-1] = "full_attention"
    nested = config.get("rope_parameters") or _GEMMA4_ROPE
    if not isinstance(nested, Mapping):
        raise ParameterError(f"config['rope_parameters']={nested!r} must be a dict")
    by_type = {}
    for t in set(types):
        if t not in nested:
            raise ParameterError(f"config['rope_parameters']={dict(nested)!r} has no {t!r}: "
                                 "Gemma 4 nests them by layer type")
        by_type[t] = _rope_dict(f"rope_parameters.{t}", nested[t], 10000.0)
    return [(by_type[t], t == "sliding_attention") for t in types]


def _cohere2(config: Mapping[str, Any], n: int) -> list[tuple[dict[str, Any] | None, bool]]:
    """Rope on the sliding layers only (Cohere2Attention rotates when sliding_window is set)."""
    types = _pattern_types(config, n, default=4)
    rope = _flat_rope(config)
    return [(rope if t == "sliding_attention" else None, t == "sliding_attention")
            for t in types]


def _typed(config: Mapping[str, Any], n: int) -> list[str]:
    """The config's layer_types, which these families' config classes always write (Lara-mini's
    linear_attention layers among them: no rope)."""
    types = _layer_types(config, n, (*_LAYER_TYPES, "linear_attention"))
    if types is None:
        raise ParameterError(f"config has no 'layer_types': the {config['model_type']} schedule "
                             "needs them (one per layer)")
    return types


def _sliding_only(config: Mapping[str, Any], n: int) -> list[tuple[dict[str, Any] | None, bool]]:
    """Rope on the sliding layers only, from layer_types (AFMoE, Lara-mini: the model hands
    position embeddings to sliding layers only; Flint: only while sliding_window is set)."""
    types = _typed(config, n)
    windowed = config["model_type"] != "flint" or config.get("sliding_window") is not None
    rope = _flat_rope(config)
    return [(rope if t == "sliding_attention" and windowed else None, t == "sliding_attention")
            for t in types]


def _exaone4(config: Mapping[str, Any], n: int) -> list[tuple[dict[str, Any] | None, bool]]:
    """EXAONE 4 (and EXAONE-MoE, Kolibri1): rope on the sliding layers, or on every layer when
    the config has no sliding_window (Exaone4Attention)."""
    types = _typed(config, n)
    everywhere = config.get("sliding_window") is None
    rope = _flat_rope(config)
    return [(rope if everywhere or t == "sliding_attention" else None, t == "sliding_attention")
            for t in types]


def _cohere2_moe(config: Mapping[str, Any], n: int) -> list[tuple[dict[str, Any] | None, bool]]:
    """Cohere2-MoE: rope on the sliding layers, and on the dense-MLP layers too when
    prefix_dense_sliding_window_pattern is 1 (Cohere2MoeAttention.force_rope)."""
    types = _typed(config, n)
    mlp = config.get("mlp_layer_types") or []
    forced = config.get("prefix_dense_sliding_window_pattern", 1) == 1
    rope = _flat_rope(config)
    return [(rope if t == "sliding_attention" or (forced and i < len(mlp) and mlp[i] == "dense")
             else None, t == "sliding_attention") for i, t in enumerate(types)]


def _muse(config: Mapping[str, Any], n: int) -> list[tuple[dict[str, Any] | None, bool]]:
    """Muse Glimmer / Spark text: layer_rope_theta per layer, 0 for a NoPE layer (the model
    passes no position embeddings there); absent, every 4th layer from the last is NoPE."""
    rope = _flat_rope(config)
    thetas = config.get("layer_rope_theta")
    if thetas is None:
        thetas = [0 if (n - 1 - i) % 4 == 0 else rope["rope_theta"] for i in range(n)]
    if not isinstance(thetas, Sequence) or isinstance(thetas, str) or len(thetas) != n:
        raise ParameterError(f"config['layer_rope_theta']={thetas!r} must list one theta per "
                             f"layer (num_hidden_layers={n})")
    types = _layer_types(config, n) or ["full_attention"] * n
    return [(_rope_dict(f"layer_rope_theta[{i}]", {**rope, "rope_theta": th}, th) if th else None,
             t == "sliding_attention") for i, (th, t) in enumerate(zip(thetas, types, strict=True))]


def _mistral_large4(config: Mapping[str, Any], n: int) -> list[tuple[dict[str, Any] | None, bool]]:
    """Mistral Large 4 text: no_rope_layers flags (1 means rope, SmolLM3's convention), every
    4th layer NoPE when absent; its layer types (indexed_attention) are not sliding."""
    flags = _flags(config, n, empty_is_default=False)
    rope = _flat_rope(config)
    return [(rope if f else None, False) for f in flags]


def _flags(config: Mapping[str, Any], n: int, *, empty_is_default: bool) -> list[int]:
    """no_rope_layers, where 1 means the layer HAS rope (despite the name); absent, every
    no_rope_layer_interval-th layer is NoPE."""
    flags = config.get("no_rope_layers")
    if flags is None or (empty_is_default and not flags):
        interval = _int("no_rope_layer_interval", config.get("no_rope_layer_interval", 4),
                        minimum=1)
        return [int((i + 1) % interval != 0) for i in range(n)]
    if not isinstance(flags, Sequence) or isinstance(flags, str) or len(flags) < n:
        raise ParameterError(f"config['no_rope_layers']={flags!r} must list a 0/1 flag for each "
                             f"of the num_hidden_layers={n} layers")
    for i, f in enumerate(flags[:n]):
        if f not in (0, 1) or isinstance(f, float):
            raise ParameterError(f"config['no_rope_layers'][{i}]={f!r} must be 0 (NoPE) or 1 "
                                 "(rope)")
    return [int(f) for f in flags[:n]]


def _smollm3(config: Mapping[str, Any], n: int) -> list[tuple[dict[str, Any] | None, bool]]:
    flags = _flags(config, n, empty_is_default=False)
    types = _layer_types(config, n)
    if types is None:  # SmolLM3Config: sliding only on NoPE layers, and only when enabled
        sliding = bool(config.get("use_sliding_window")) and config.get(
            "sliding_window") is not None
        types = ["sliding_attention" if sliding and not f else "full_attention" for f in flags]
    rope = _flat_rope(config)
    return [(rope if f else None, t == "sliding_attention") for f, t in zip(flags, types,
                                                                           strict=True)]


def _llama4(config: Mapping[str, Any], n: int) -> list[tuple[dict[str, Any] | None, bool]]:
    flags = _flags(config, n, empty_is_default=True)  # Llama4TextConfig: [] means the default
    types = _layer_types(config, n)
    if types is None:  # rope layers attend within chunks of attention_chunk_size
        chunked = config.get("attention_chunk_size", 8192) is not None
        types = ["chunked_attention" if f and chunked else "full_attention" for f in flags]
    rope = _flat_rope(config)
    return [(rope if f else None, t != "full_attention") for f, t in zip(flags, types,
                                                                        strict=True)]


_RULES = {"gemma3_text": _gemma3, "gemma4_text": _gemma4, "cohere2": _cohere2, "smollm3": _smollm3,
          "llama4_text": _llama4, "afmoe": _sliding_only, "flint": _sliding_only,
          "lara_mini": _sliding_only, "exaone4": _exaone4, "exaone_moe": _exaone4,
          "kolibri1": _exaone4, "cohere2_moe": _cohere2_moe, "muse_glimmer_text": _muse,
          "muse_spark_text": _muse, "mistral_large4_text": _mistral_large4}


def _layers(config: Any) -> list[tuple[dict[str, Any] | None, bool]]:
    params.mapping("config", config)  # a NaN or an infinity anywhere is refused, by key
    text = _text_config(config)
    for key in ("rope_scaling", "rope_parameters"):
        if text.get(key) and not isinstance(text[key], Mapping):
            raise ParameterError(f"config[{key!r}]={text[key]!r} must be a dict")
    if not isinstance(text["model_type"], str):
        raise ParameterError(f"config['text_config']['model_type']={text['model_type']!r} must "
                             "be a string")
    if text["model_type"] not in _RULES:
        raise ParameterError(f"config['text_config']['model_type']={text['model_type']!r} has "
                             f"no layer schedule (known: {', '.join(sorted(_RULES))})")
    n = _int("num_hidden_layers", _required(text, "num_hidden_layers", text["model_type"]),
             minimum=1)
    return _RULES[text["model_type"]](text, n)


def layer_rope_parameters(config: Mapping[str, Any],
                          layer: int | None = None) -> list[dict[str, Any] | None] | dict[
                              str, Any] | None:
    """Per layer, the rope parameters (a ``rope_parameters`` dict with ``rope_type`` and
    ``rope_theta``, for :func:`posenc.rope` ``scaling=``) or None for a NoPE layer.

    ``config``: a transformers config as a dict (``config.to_dict()`` or ``config.json``) with
    ``model_type`` ``gemma3_text`` / ``gemma3``, ``gemma4_text`` / ``gemma4`` (with
    ``text_config``), ``cohere2``,
    ``smollm3``, ``llama4_text`` / ``llama4``. ``layer``: one layer's parameters instead of
    the list. Gemma 3: every layer, sliding ones at ``rope_local_base_freq`` unscaled, full
    ones at ``rope_theta`` with ``rope_scaling``; Gemma 4: sliding default at 1e4, full
    proportional (partial 0.25) at 1e6, the last layer full; Cohere2: sliding layers only; SmolLM3 and
    Llama 4: the layers whose ``no_rope_layers`` flag is 1 (1 means the layer HAS rope)."""
    layers = [rope for rope, _ in _layers(config)]
    if layer is None:
        return layers
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < len(layers):
        raise ParameterError(f"layer={layer!r} is beyond the model's depth: "
                             f"num_hidden_layers={len(layers)} (layers 0..{len(layers) - 1})")
    return layers[layer]


def layer_schedule(config: Mapping[str, Any], *, dtype: Any = None, device: Any = None) -> Any:
    """The layer schedule as an array ``[num_hidden_layers, 5]``: per layer ``has_rope``
    (0/1), ``local`` (1 for sliding or chunked attention), ``schedule`` (the index of its
    ``rope_type`` in ``("default", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope",
    "proportional", "ntk_alpha")``, where ``dynamic`` with an ``alpha`` counts as
    ``ntk_alpha``), ``rope_theta`` and ``factor`` (1 when the dict has none); the last
    three are 0 on a NoPE layer. In ``dtype`` (float32 by default, float64 possible; narrower
    ones raise Unsupported) of the library that defines it (NumPy when None), on ``device``.
    See :func:`layer_rope_parameters`."""
    rows = []
    for rope, local in _layers(config):
        if rope is None:
            rows.append([0.0, float(local), 0.0, 0.0, 0.0])
        else:
            rows.append([1.0, float(local), float(SCHEDULES.index(_schedule_name(rope))),
                         float(rope["rope_theta"]), float(rope.get("factor") or 1.0)])
    xp = array_api.namespace_of_dtype(dtype)
    out = array_api.output_dtype(xp, dtype)
    if array_api.dtype_name(out) not in ("float32", "float64"):
        raise Unsupported(f"dtype={array_api.dtype_name(out)}: layer_schedule needs float32 or "
                          "float64 (rope_theta reaches 1e7)")
    return array_api.asarray(xp, rows, dtype=out, device=device)
