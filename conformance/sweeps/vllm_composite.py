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

# the towers' sizes: small, but consistent with each other (heads divide the widths)
TOWER = {
    "hidden_size": 64, "embed_dim": 64, "intermediate_size": 64, "num_attention_heads": 4,
    "num_heads": 4, "num_key_value_heads": 4, "head_dim": 16, "depth": 2,
    "num_hidden_layers": 2, "num_layers": 2, "encoder_layers": 2, "encoder_attention_heads": 4,
    "encoder_ffn_dim": 64, "d_model": 64, "vocab_size": 256, "projection_dim": 64,
    "num_experts": 4, "moe_intermediate_size": 32,
}
# tower fields that must equal the language model's width (the merger's output)
TO_TEXT = ("out_hidden_size", "text_hidden_size", "output_dim", "out_dim")


def composite_class(text_config: Any) -> tuple[type, str] | None:
    """(transformers' top-level config class that holds ``text_config``'s class as one of its
    sub-configs, that key), from the text config's own configuration module's package."""
    package = type(text_config).__module__.rsplit(".", 1)[0]
    for path in sorted(Path(importlib.import_module(package).__file__).parent.glob(
            "configuration_*.py")):
        module = importlib.import_module(f"{package}.{path.stem}")
        for value in vars(module).values():
            subs = getattr(value, "sub_configs", None)
            if isinstance(value, type) and isinstance(subs, dict) and value.__module__ == \
                    module.__name__:
                key = next((k for k, c in subs.items() if c is type(text_config)), None)
                if key is not None:
                    return value, key
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
    for key in ("fullatt_block_indexes", "deepstack_visual_indexes"):
        if isinstance(values.get(key), list):  # layer indices within the shrunk depth
            small[key] = [i for i in values[key] if i < TOWER["depth"]][:1] or [0]
    return type(part)(**{**values, **small})


def composite(text_config: Any) -> Any:
    """The family's top-level config around ``text_config`` (see the module text): every
    other part as the top-level class's defaults make it (an ``AutoConfig`` part becomes the
    model type the class names), shrunk."""
    from transformers import PreTrainedConfig

    found = composite_class(text_config)
    if found is None:
        raise LookupError(f"no top-level config holds {type(text_config).__name__}")
    top, key = found
    default = top(**{key: text_config})
    parts = {key: text_config}
    for name in top.sub_configs:
        part = getattr(default, name, None)
        if name != key and isinstance(part, PreTrainedConfig):
            parts[name] = shrunk_part(part, text_config)
    return top(**parts)
