"""A family's config as ``posenc sweep transformers`` builds it: the config class its text rotary
module takes, shrunk to a tiny model (no hub download, no weights), and its dict."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .transformers_observation import Family

# rotary classes of other modalities: the sweep checks the text rope
OTHER_MODALITY = re.compile(r"vision|visual|audio|video|image|patch|2d|3d|encoder|speech|"
                            r"vit|tracker|depth|mask", re.IGNORECASE)

# config attribute -> the small value it gets, where the family's config has the attribute
SMALL = {
    "hidden_size": 64, "intermediate_size": 64, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256, "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32, "ffn_hidden_size": 64, "n_embd": 64, "n_head": 4,
    "n_inner": 64, "d_model": 64, "d_ff": 64, "d_kv": 16, "num_heads": 4,
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "num_experts_per_token": 2,
    "n_shared_experts": 1, "n_group": 1, "topk_group": 1, "kv_lora_rank": 16,
    "q_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16,
    "global_head_dim": 32, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
    "linear_key_head_dim": 16, "linear_value_head_dim": 16, "mamba_n_heads": 4,
    "mamba_d_head": 32, "mamba_d_state": 8, "mamba_expand": 2, "mamba_n_groups": 1,
    "ssm_state_size": 8, "expert_intermediate_size": 32, "ffn_dim": 64,
    "hidden_size_per_layer_input": 8, "vocab_size_per_layer_input": 256,
    "laurel_rank": 8, "altup_num_inputs": 2, "num_kv_shared_layers": 0,
    "first_k_dense_replace": 1, "index_head_dim": 16, "index_n_heads": 2, "index_topk": 4,
    "sliding_window": 4, "attention_chunk_size": 4, "num_codebooks": 2,
    "expert_hidden_size": 32, "rotary_dim": 8, "rotary_emb_base": None, "kv_channels": 16,
    "expert_ffn_hidden_size": 32,
}
MAX_LAYERS = 8


# -- configs -------------------------------------------------------------------------------------
def pick_rotary(family: Family) -> tuple[str, str] | None:
    """The text rotary class: the only one, one named ``*Text*``, else those whose name past
    the family's common prefix names no other modality."""
    if not family.rotary:
        return None
    if len({c for _, c in family.rotary}) == 1:
        return family.rotary[0]
    names = [c for _, c in family.rotary]
    prefix = names[0]
    for name in names[1:]:  # the family's CamelCase prefix, character by character
        while not name.startswith(prefix):
            prefix = prefix[:-1]
    text = [rc for rc in family.rotary if "Text" in rc[1][len(prefix):]]
    pool = text or [rc for rc in family.rotary if not OTHER_MODALITY.search(
        rc[1][len(prefix):].replace("RotaryEmbedding", ""))]
    if not pool:
        return None
    return min(pool, key=lambda rc: (len(rc[1]), rc[1]))


def config_classes(module: Any) -> list[type]:
    from transformers import PreTrainedConfig

    package = module.__name__.rsplit(".", 1)[0]
    found: list[type] = []
    for path in sorted(Path(module.__file__).parent.glob("configuration_*.py")):
        mod = importlib.import_module(f"{package}.{path.stem}")
        for value in vars(mod).values():
            if (isinstance(value, type) and issubclass(value, PreTrainedConfig)
                    and value is not PreTrainedConfig and value.__module__ == mod.__name__):
                found.append(value)
    return found


def annotated_config(cls: type, module: Any) -> type | None:
    try:
        annotation = inspect.signature(cls.__init__).parameters["config"].annotation
    except (KeyError, ValueError, TypeError):
        return None
    if isinstance(annotation, str):
        annotation = getattr(module, annotation.split("|")[0].strip().strip("'\""), None)
    if annotation is inspect.Parameter.empty:
        return None
    return annotation if isinstance(annotation, type) else None


def _text_part(config_cls: type) -> type:
    """A composite (vision-language, speech) config's text config class, else itself."""
    from transformers import PreTrainedConfig

    sub = getattr(config_cls, "sub_configs", None) or {}
    for key in ("text_config", "language_config", "decoder_config", "llm_config"):
        cls = sub.get(key)
        if isinstance(cls, type) and issubclass(cls, PreTrainedConfig):
            return cls
    return config_cls


def text_config_class(module: Any) -> type:
    """The family's text config class, where no rotary module names one."""
    classes = config_classes(module)
    pool = [c for c in classes if "Text" in c.__name__] or [
        c for c in classes if not OTHER_MODALITY.search(c.__name__)] or classes
    if not pool:
        raise LookupError(f"no config class beside {module.__name__}")
    return _text_part(min(pool, key=lambda c: len(c.__name__)))


def choose_config_class(rotary_cls: type, module: Any) -> type:
    annotated = annotated_config(rotary_cls, module)
    classes = config_classes(module)
    if annotated is not None and annotated in classes:
        return _text_part(annotated)
    text = [c for c in classes if "Text" in c.__name__ or "Decoder" in c.__name__]
    plain = [c for c in classes if not OTHER_MODALITY.search(c.__name__)]
    pool = text or plain or classes
    if not pool:
        raise LookupError(f"no config class beside {module.__name__}")
    return _text_part(min(pool, key=lambda c: len(c.__name__)))


def _layer_count(default: Any) -> int:
    """Enough layers to show every layer type (and NoPE flag) of the default config."""
    n = 2
    for attr in ("layer_types", "no_rope_layers", "block_types"):
        values = getattr(default, attr, None)
        if isinstance(values, (list, tuple)) and values:
            firsts: dict[Any, int] = {}
            for i, value in enumerate(values):
                firsts.setdefault(value, i)
            n = max(n, max(firsts.values()) + 1)
    for attr in ("sliding_window_pattern", "no_rope_layer_interval", "full_attention_interval",
                 "interleave_moe_layer_step"):
        value = getattr(default, attr, None)
        if isinstance(value, int) and 1 < value <= MAX_LAYERS:
            n = max(n, value)
    return min(n, MAX_LAYERS)


def _modeling_source(config_cls: type) -> str:
    folder = Path(sys.modules[config_cls.__module__].__file__).parent
    return "".join(p.read_text(encoding="utf-8") for p in folder.glob("modeling_*.py"))


def _shrunk_section(section: list[int], half: int) -> list[int]:
    """M-RoPE sections in the same proportions, summing to ``half`` frequencies."""
    total = sum(section)
    out = [max(1, round(s * half / total)) for s in section]
    out[-1] += half - sum(out)
    return out


def _partial_factor(values: dict[str, Any]) -> float | None:
    params = values.get("rope_parameters")
    candidates = [values.get("partial_rotary_factor")]
    if isinstance(params, dict):
        candidates.append(params.get("partial_rotary_factor"))
        candidates += [v.get("partial_rotary_factor") for v in params.values()
                       if isinstance(v, dict)]
    found = [float(c) for c in candidates if isinstance(c, (int, float))]
    return min(found) if found else None


def _mamba_heads(attempt: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """Mamba heads that tile the mamba width (mamba_d_ssm, else mamba_expand × hidden_size)."""
    expand = attempt.get("mamba_expand", values.get("mamba_expand") or 2)
    width = expand * attempt.get("hidden_size", values.get("hidden_size"))
    heads = attempt.get("mamba_n_heads", values.get("mamba_n_heads") or 4)
    fixed = {**attempt, "mamba_d_head": width // heads}
    if "mamba_d_ssm" in values:  # Falcon-H1: an explicit width would override the product
        fixed["mamba_d_ssm"] = None
    return fixed


def _condition_dim(attempt: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A flow head conditioned on the backbone's (shrunk) hidden size."""
    head = dict(values.get("flow_head_config") or {})
    head["condition_dim"] = attempt.get("hidden_size", values.get("hidden_size"))
    return {**attempt, "flow_head_config": head}


def _per_layer_lists(attempt: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """Every per-layer list of the default config (one entry per default layer) cut to the
    shrunk depth."""
    depth = values.get("num_hidden_layers")
    n = attempt.get("num_hidden_layers")
    lists = {k: list(v)[:n] for k, v in values.items()
             if isinstance(v, list) and depth and len(v) == depth and k not in attempt}
    return {**attempt, **lists}


def _divisible(attempt: dict[str, Any], values: dict[str, Any],
               exc: Exception) -> dict[str, Any] | None:
    """``a (x) must be divisible by b (y)``: a made the smallest multiple of y it can be."""
    found = re.search(r"(\w+)`? \((\d+)\) must be divisible by `?(\w+)`? \((\d+)\)", str(exc))
    if found is None:
        return None
    key, value, divisor = found[1], int(found[2]), int(found[4])
    return {**attempt, key: divisor * max(1, value // divisor)}


def _named_default(attempt: dict[str, Any], exc: Exception) -> dict[str, Any]:
    """Back to the default for the shrunk size the config class names as unsupported."""
    named = set(re.findall(r"`(\w+)=", str(exc)))
    return {k: v for k, v in attempt.items() if k not in named}


# a config class's validation message -> the consistent sizes that answer it
_REPAIRS: tuple[tuple[str, Any], ...] = (
    ("Mamba head state do not match", _mamba_heads),
    ("condition_dim", _condition_dim),
    ("must be equal to the number of `layer_types`", _per_layer_lists),
    # GLM-5 Next: its attention is NoPE, the rope slice 0 wide by design
    ("Expecting NoPE", lambda attempt, values: {k: v for k, v in attempt.items()
                                                if k != "qk_rope_head_dim"}),
)


def _repaired(attempt: dict[str, Any], values: dict[str, Any],
              exc: Exception) -> dict[str, Any] | None:
    """The attempt with the sizes the validation error asks for made consistent, or None."""
    for message, repair in _REPAIRS:
        if message in str(exc):
            return repair(attempt, values)
    if "supports" in str(exc) and (fixed := _named_default(attempt, exc)) != attempt:
        return fixed
    return _divisible(attempt, values, exc)


def tiny_config(config_cls: type) -> Any:
    """The config class's defaults with the sizes shrunk."""
    default = config_cls()
    values = default.to_dict()
    small = {k: v for k, v in SMALL.items() if k in values and v is not None
             and not isinstance(values[k], (list, dict))}
    if "qk_rope_head_dim" in values:  # DeepSeek: head_dim is qk_rope_head_dim
        small.pop("head_dim", None)
        if values.get("head_dim") == values["qk_rope_head_dim"]:  # LongCat: both fields
            small["head_dim"] = SMALL["qk_rope_head_dim"]
    elif "head_dim" in small and values.get("head_dim") is None and "head_dim" in values:
        small["head_dim"] = 16
    n = _layer_count(default)
    for key in ("num_hidden_layers", "n_layer", "num_layers"):
        if key in values:
            small[key] = n
    if values.get("layer_types"):
        small["layer_types"] = list(values["layer_types"])[:n]
    if isinstance(values.get("no_rope_layers"), list) and values["no_rope_layers"]:
        small["no_rope_layers"] = list(values["no_rope_layers"])[:n]
    for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
        if isinstance(values.get(key), int) and values[key] >= 256:
            small[key] = 1
    if isinstance(values.get("eos_token_id"), list):
        small["eos_token_id"] = 2
    if "rotary_dim" in small and values.get("head_dim") is None:  # GPT-J / CodeGen style
        small["rotary_dim"] = 8
    if "global_head_dim" not in small and "global_head_dim" in inspect.getsource(config_cls):
        small["global_head_dim"] = SMALL["global_head_dim"]  # Gemma 4: popped from kwargs
    factor = _partial_factor(values)
    if factor is not None and factor < 1:
        # a head width whose rotary part is even, as the published sizes make it
        width = next((w for w in (16, 32, 48, 64, 80, 96, 128, 160, 192, 256)
                      if int(w * factor) >= 16 and int(w * factor) % 2 == 0
                      and abs(w * factor - round(w * factor)) < 0.05), 16)
        if "head_dim" in small:
            small["head_dim"] = width
        elif "hidden_size" in small and "num_attention_heads" in small:
            small["hidden_size"] = width * small["num_attention_heads"]
    if factor is not None and "rotary_dim" in small:  # MiniMax: rotary_dim beside the factor
        head = small.get("head_dim") or small.get("hidden_size", 64) // small.get(
            "num_attention_heads", 4)
        small["rotary_dim"] = int(head * factor)
    if "kv_lora_rank" in values:  # multi-head latent attention: as many k heads as q heads
        small["num_key_value_heads"] = small.get("num_attention_heads", 4)
    params = values.get("rope_parameters")
    if isinstance(params, dict) and not any(isinstance(v, dict) for v in params.values()):
        section = params.get("mrope_section")
        if section is None and "mrope_section" in _modeling_source(config_cls):
            section = [16, 24, 24]  # the default the Qwen-VL modules fall back to
        if section and params.get("rope_type", params.get("rope_theta")):
            head = small.get("qk_rope_head_dim") or small.get("head_dim") or small.get(
                "hidden_size", 64) // small.get("num_attention_heads", 4)
            small["rope_parameters"] = {**params, "mrope_section": _shrunk_section(
                section, int(head * (factor or 1.0)) // 2)}
    for key in ("mlp_layer_types",):
        if isinstance(values.get(key), list):
            small[key] = list(values[key])[:n]
    attempts = [small, {k: v for k, v in small.items() if k not in ("sliding_window",
                                                                 "attention_chunk_size")},
                {**small, "num_key_value_heads": small.get("num_attention_heads", 4)}]
    error: Exception | None = None
    repairs = 0
    while attempts:
        attempt = attempts.pop(0)
        try:
            config = config_cls(**attempt)
        except Exception as exc:  # a config class rejecting the sizes
            error = exc
            fixed = _repaired(attempt, values, exc)
            if fixed is not None and fixed != attempt and repairs < 6:
                repairs += 1
                attempts.insert(0, fixed)
            continue
        with contextlib.suppress(Exception):
            config._attn_implementation = "eager"
        return config
    assert error is not None
    raise error


def config_dict(config: Any) -> dict[str, Any]:
    """``to_dict()`` with the standard names the config class maps to its own (GPT-J's
    ``n_embd`` is its ``hidden_size``) spelled out."""
    values = config.to_dict()
    for key in ("hidden_size", "num_attention_heads", "num_hidden_layers",
                "max_position_embeddings", "num_key_value_heads"):
        if key not in values:
            with contextlib.suppress(Exception):
                value = getattr(config, key)
                if isinstance(value, int):
                    values[key] = value
    # head_dim under the config's own name (Zamba's attention_head_dim), the width its
    # rotary module reads through the attribute map
    mapped = getattr(config, "attribute_map", {}).get("head_dim")
    if "head_dim" not in values and isinstance(values.get(mapped), int):
        values["head_dim"] = values[mapped]
    return values
