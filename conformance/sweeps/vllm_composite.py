"""The top-level config a multimodal vLLM model class reads, from a family's shrunk text config.

The sweeps shrink a family's *text* config (the part whose rotary they check). vLLM's
multimodal classes (``Qwen2VLForConditionalGeneration``, ``AriaForConditionalGeneration``,
...) read the composite config instead: ``config.text_config`` for the language model they
build, ``config.vision_config`` (and audio, ...) for their towers. :func:`composite` builds
it with transformers' own top-level class of the family: the shrunk text config as its
text part, and every other part from its class's defaults with the sizes shrunk (the towers
are built with no weights and never run; only the language model's rotary is checked).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from .transformers_configs import _shrunk_section

# the towers' sizes: small, but consistent with each other (heads divide the widths)
TOWER = {
    "hidden_size": 64, "embed_dim": 64, "intermediate_size": 64, "num_attention_heads": 4,
    "num_heads": 4, "num_key_value_heads": 4, "head_dim": 16, "depth": 2,
    "num_hidden_layers": 2, "num_layers": 2, "encoder_layers": 2, "encoder_attention_heads": 4,
    "encoder_ffn_dim": 64, "d_model": 64, "vocab_size": 256, "projection_dim": 64,
    "num_experts": 4, "moe_intermediate_size": 32,
}
DEPTHS = ("depth", "num_hidden_layers", "num_layers", "encoder_layers")
# tower fields that must equal the language model's width (the merger's output)
TO_TEXT = ("out_hidden_size", "text_hidden_size", "output_dim", "out_dim")


# Fields vLLM's classes read that transformers' config classes leave out (or default
# otherwise): family -> part ("text", "top" or a sub-config's key) -> field -> value, or a
# callable of that part where the value follows from its (shrunk) sizes. None of them
# touches the rotary but GLM-4V's and GLM-OCR's width: vLLM's Glm4 attention takes a config
# without ``partial_rotary_factor`` as 0.5, transformers as 1.0; the published checkpoints
# state 0.5, and the sweep reads the rotary from the config with it. (Without the key vLLM
# refuses the config, loudly: its M-RoPE asserts that the sections fill the half width.
# llama.cpp's converter takes the same 0.5 silently: docs/known-issues.md.)
FIELDS: dict[str, dict[str, dict[str, Any]]] = {
    "glm4v": {"text": {"partial_rotary_factor": 0.5}},
    "glm_ocr": {"text": {"partial_rotary_factor": 0.5}},
    "glm4v_moe": {"text": {"head_dim": lambda c: c.hidden_size // c.num_attention_heads,
                           "use_qk_norm": False}},
    "qwen3_vl_moe": {"text": {"norm_topk_prob": True}},
    # transformers reads a missing output gate as hidden_act; vLLM asserts on None
    "qwen4_exp": {"text": {"output_gate_type": lambda c: c.hidden_act}},
    "qwen3_omni_moe": {"text": {"tie_word_embeddings": False},
                       "vision_config": {"image_size": 64, "apply_vit_abs_pos_embed": True}},
    "granite4_vision": {"top": {"deepstack_layer_map": [], "downsample_rate": "1/2"}},
    "muse_glimmer": {"vision_config": {
        "merge_kernel_size": 2, "output_dim": lambda c: c.hidden_size * 2 ** 2}},
    "cohere_compass": {"top": {"tie_word_embeddings": True}},
}


class NotATextConfig(ValueError):
    """The family's shrunk config holds the text config instead of being it."""


def set_fields(config: Any, fields: dict[str, Any]) -> None:
    for name, value in fields.items():
        setattr(config, name, value(config) if callable(value) else value)


def _top_classes(part_cls: type) -> list[type]:
    """The top-level config classes beside ``part_cls`` (its package's configuration
    modules) that have sub-configs."""
    package = part_cls.__module__.rsplit(".", 1)[0]
    found = []
    for path in sorted(Path(importlib.import_module(package).__file__).parent.glob(
            "configuration_*.py")):
        module = importlib.import_module(f"{package}.{path.stem}")
        found += [value for value in vars(module).values()
                  if isinstance(value, type) and value.__module__ == module.__name__
                  and isinstance(getattr(value, "sub_configs", None), dict)
                  and value is not part_cls]
    return found


def composite_class(part: Any) -> tuple[type, str] | None:
    """(transformers' top-level config class that holds ``part``'s class as a sub-config,
    that key): the class named there, else a ``text_config`` its class leaves to
    ``AutoConfig``."""
    tops = _top_classes(type(part))
    for top in tops:
        key = next((k for k, c in top.sub_configs.items() if c is type(part)), None)
        if key is not None:
            return top, key
    if "Text" in type(part).__name__:
        auto = [top for top in tops if getattr(top.sub_configs.get("text_config"), "__name__",
                                                None) == "AutoConfig"]
        if auto:
            return auto[0], "text_config"
    return None


def wants_composite(arch: str, text_config: Any) -> bool:
    """A ``*ForConditionalGeneration`` class handed a text sub-config wants the composite."""
    return not arch.endswith("ForCausalLM") and composite_class(text_config) is not None


def shrunk_part(part: Any, text_config: Any) -> Any:
    """A copy of the config ``part`` with the sizes shrunk (:data:`TOWER`), its output
    width the text model's."""
    values = part.to_dict()
    small = {k: v for k, v in TOWER.items() if isinstance(values.get(k), int)}
    width = int(getattr(text_config, "hidden_size", 0) or 0)
    small.update({k: width for k in TO_TEXT if isinstance(values.get(k), int) and width})
    layers = next((values[k] for k in DEPTHS if isinstance(values.get(k), int)), None)
    for key, value in values.items():  # per-layer lists (layer_types) cut to the depth
        if isinstance(value, list) and layers and len(value) == layers:
            small[key] = value[:TOWER["depth"]]
    for key in ("fullatt_block_indexes", "deepstack_visual_indexes"):
        if isinstance(values.get(key), list):  # layer indices within the shrunk depth
            small[key] = [i for i in values[key] if i < TOWER["depth"]][:1] or [0]
    return type(part)(**{**values, **small})


def composite(text_config: Any) -> Any:
    """The family's top-level config around ``text_config`` (see the module text): every
    other part as the top-level class's defaults make it (an ``AutoConfig`` part becomes the
    model type the class names; a part it leaves empty, its class's defaults), shrunk; a
    top-level config that is itself a part of another (Qwen3-Omni's thinker) is wrapped
    again."""
    from transformers import PreTrainedConfig

    found = composite_class(text_config)
    if found is None:
        raise LookupError(f"no top-level config holds {type(text_config).__name__}")
    config = text_config
    while found is not None:
        top, key = found
        default = top(**{key: config})
        parts = {key: config}
        for name, part_cls in top.sub_configs.items():
            part = getattr(default, name, None)
            if part is None and isinstance(part_cls, type) and part_cls.__name__ != "AutoConfig":
                part = part_cls()
            if name != key and isinstance(part, PreTrainedConfig):
                parts[name] = shrunk_part(part, text_config)
        config = top(**parts)
        found = composite_class(config)
    return config


def for_vllm(family: str, arch: str, text_config: Any) -> Any:
    """The config vLLM's ``arch`` class is built from: ``text_config`` with the family's
    :data:`FIELDS` (set in place: the sweep reads the rotary from the same config), wrapped
    in the family's top-level config where the class wants it."""
    if getattr(text_config, "sub_configs", None) and \
            getattr(text_config, "num_hidden_layers", None) is None:
        raise NotATextConfig(
            f"the family's shrunk config is the top-level {type(text_config).__name__}, "
            "whose parts the sweep does not shrink (vLLM would build them at full size)")
    name = type(text_config).__name__
    if "Text" not in name and any(word in name for word in ("Vision", "Audio")):
        raise NotATextConfig(f"the family's shrunk config is {name} "
                             "(the rotary the sweep picked is another modality's)")
    fields = FIELDS.get(family, {})
    text_fields = dict(fields.get("text", {}))
    factor = text_fields.pop("partial_rotary_factor", None)
    if factor is not None:  # transformers 5 keeps it in rope_parameters, with the sections
        params = dict(text_config.rope_parameters)
        section = params.get("mrope_section")
        if section:
            params["mrope_section"] = _shrunk_section(section, round(sum(section) * factor))
        text_config.rope_parameters = {**params, "partial_rotary_factor": factor}
    set_fields(text_config, text_fields)
    if not wants_composite(arch, text_config):
        return text_config
    config = composite(text_config)
    set_parts(family, config)
    return config


def set_parts(family: str, config: Any) -> None:
    """The family's :data:`FIELDS` of the top-level config and its parts, set on ``config``:
    on the one saved, and again on the one vLLM loads (a part's config class drops the
    fields it does not declare when it is read back)."""
    for part, values in FIELDS.get(family, {}).items():
        if part == "top":
            set_fields(config, values)
        elif part != "text":
            set_fields(_part(config, part), values)


def _part(config: Any, key: str) -> Any:
    """The sub-config ``key`` of ``config`` or of one of its sub-configs (the thinker's)."""
    found = getattr(config, key, None)
    if found is not None:
        return found
    for name in getattr(config, "sub_configs", {}):
        inner = getattr(config, name, None)
        if inner is not None and getattr(inner, key, None) is not None:
            return getattr(inner, key)
    raise LookupError(f"{type(config).__name__} has no {key}")



def renumber(modules: dict[int, Any], model: Any, layers: int) -> dict[int, Any]:
    """vLLM's layer index -> the config's, where vLLM numbers each decoder layer's attention
    and MLP as two layers (Cosmos 3 Edge's ``layers_block_type``: attention at 2i, MLP at
    2i + 1, for transformers' layer i)."""
    text = getattr(getattr(model, "language_model", model), "config", None)
    kinds = list(getattr(text, "layers_block_type", None) or [])
    if len(kinds) != 2 * layers or any(k == "mlp" for k in kinds[::2]) or \
            any(k != "mlp" for k in kinds[1::2]):
        return modules
    return {index // 2: value for index, value in modules.items()}
