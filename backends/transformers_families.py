"""transformers' model families as transformers builds them: what each family's rotary module
and attention compute on a tiny, randomly initialised model (``posenc sweep transformers``).

This module only observes; it judges nothing. :func:`discover` lists the installed
transformers' families that define a ``*RotaryEmbedding`` class or an ALiBi / T5-style
relative bias, by reading the package's modeling sources (no hand list). :func:`observe`
builds one family's config from its config class with the sizes shrunk (no hub download, no
weights), then records, as float64 NumPy copies of what transformers computed in float32:

- ``tables``: the rotary module's ``inv_freq``, ``attention_scaling`` and cos/sin at positions
  up to past the original context, once per layer type when the module takes one;
- ``calls``: a forward of the tiny model (a left-padded prefill with explicit position ids,
  then one KV-cache decode step) with every call of the family's own ``apply_rotary*``
  functions recorded: the layer it ran in, its input and output tensors, the positions fed;
- ``biases``: the family's own ALiBi or T5 bias functions on small inputs.

Anything that raises is recorded with the exception's last frame in transformers, and the
observation goes on with the next part (:class:`Observation`'s ``problems``).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import re
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROTARY_CLASS = re.compile(r"^class (\w*RotaryEmbedding\w*)\(", re.MULTILINE)
ALIBI = re.compile(r"^def (build_\w*alibi\w*|\w*alibi\w*)\(", re.MULTILINE)
T5_BUCKET = re.compile(r"def _?relative_position_bucket\(")
# rotary classes of other modalities: the sweep checks the text rope
OTHER_MODALITY = re.compile(r"vision|visual|audio|video|image|patch|2d|3d|encoder|speech|"
                            r"vit|tracker|depth|mask", re.IGNORECASE)

SEQ = 6
PREFILL_MASK = ((0, 0, 1, 1, 1, 1), (1, 1, 1, 1, 1, 1))  # the first row is left-padded
# generate()'s position ids: cumsum(mask) - 1, pads at 1
PREFILL_POSITIONS = ((1, 1, 0, 1, 2, 3), (0, 1, 2, 3, 4, 5))
DECODE_POSITIONS = ((4,), (6,))

# config attribute -> the small value it gets, where the family's config has the attribute
SMALL = {
    "hidden_size": 64, "intermediate_size": 64, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256, "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32, "ffn_hidden_size": 64, "n_embd": 64, "n_head": 4,
    "n_inner": 64, "d_model": 64, "d_ff": 64, "d_kv": 16, "num_heads": 4,
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
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
MAX_PARAMETERS = 20_000_000
TIMEOUT = 300.0  # seconds for one family, in its own process


@dataclass(frozen=True)
class Family:
    """A model family of the installed transformers: its folder under ``transformers.models``,
    the rotary classes it defines (by module) and the bias kinds its modeling code holds."""

    name: str
    rotary: tuple[tuple[str, str], ...] = ()  # (module, class)
    biases: tuple[tuple[str, str], ...] = ()  # (module, "alibi" | "t5")


@dataclass
class Observation:
    family: str
    config: dict[str, Any] = field(default_factory=dict)  # the tiny config's to_dict()
    config_class: str = ""
    rotary_class: str = ""
    tables: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    layers: int = 0
    wiring: str = ""  # how the calls were captured, or why they were not
    biases: list[dict[str, Any]] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)  # part -> the exception, last frame


def transformers_root() -> Path:
    """transformers' ``models`` folder, found without importing transformers."""
    import importlib.util

    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("posenc sweep transformers needs transformers: "
                                  "pip install transformers")
    return Path(next(iter(spec.submodule_search_locations))) / "models"


def discover(names: list[str] | None = None) -> list[Family]:
    """Every family with a rotary class or a relative/ALiBi bias, sorted by name."""
    families = []
    for folder in sorted(transformers_root().iterdir()):
        if not folder.is_dir() or (names and folder.name not in names):
            continue
        rotary, biases = [], []
        for source in sorted(folder.glob("modeling_*.py")):
            text = source.read_text(encoding="utf-8")
            module = f"transformers.models.{folder.name}.{source.stem}"
            rotary += [(module, c) for c in ROTARY_CLASS.findall(text)]
            if ALIBI.search(text):
                biases.append((module, "alibi"))
            if T5_BUCKET.search(text) or re.search(r"relative_attention_bias\b", text):
                biases.append((module, "t5"))
        if rotary or biases:
            families.append(Family(folder.name, tuple(rotary), tuple(biases)))
    return families


def last_frame(exc: BaseException) -> str:
    """``Type: message (file:line in function)`` of the innermost frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    if frames:
        f = frames[-1]
        where = f" ({Path(f.filename).parent.name}/{Path(f.filename).name}:{f.lineno} in {f.name})"
    message = " ".join(str(exc).split())
    if len(message) > 200:
        message = message[:197] + "..."
    return f"{type(exc).__name__}: {message}{where}"


def _numpy(t: Any) -> np.ndarray:
    return t.detach().to("cpu").double().numpy().copy()


# -- configs -------------------------------------------------------------------------------------
def _pick_rotary(family: Family) -> tuple[str, str] | None:
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


def _config_classes(module: Any) -> list[type]:
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


def _annotated_config(cls: type, module: Any) -> type | None:
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


def choose_config_class(rotary_cls: type, module: Any) -> type:
    annotated = _annotated_config(rotary_cls, module)
    classes = _config_classes(module)
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
    for attempt in attempts:
        try:
            config = config_cls(**attempt)
        except Exception as exc:  # a config class rejecting the sizes
            error = exc
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
    return values


# -- the rotary module ---------------------------------------------------------------------------
def table_positions(config: Any) -> list[int]:
    """Positions from 0 to past the original context (the schedules switch there)."""
    params = getattr(config, "rope_parameters", None) or {}
    if params and all(isinstance(v, dict) for v in params.values()):
        params = next(iter(params.values()))
    original = params.get("original_max_position_embeddings") or getattr(
        config, "max_position_embeddings", None) or 2048
    original = int(original)
    return [0, 1, 2, 3, 7, 100, original - 1, original, original + 1, 2 * original + 5]


def _call_rotary(rotary: Any, config: Any, positions: list[int],
                 layer_type: str | None) -> tuple[np.ndarray, np.ndarray]:
    import torch

    hidden = int(getattr(config, "hidden_size", 64) or 64)
    x = torch.zeros(1, len(positions), hidden, dtype=torch.float32)
    ids = torch.tensor([positions], dtype=torch.long)
    params = inspect.signature(rotary.forward).parameters
    kwargs = {"layer_type": layer_type} if layer_type is not None and "layer_type" in params \
        else {}
    with torch.no_grad():
        if "position_ids" in params:
            out = rotary(x, position_ids=ids, **kwargs)
        else:
            out = rotary(x, ids, **kwargs)
    if isinstance(out, torch.Tensor) and out.is_complex():
        cos, sin = out.real, out.imag
    elif isinstance(out, (tuple, list)) and len(out) >= 2:
        cos, sin = out[0], out[1]
    else:
        raise TypeError(f"the rotary module returned {type(out).__name__}, not (cos, sin)")
    return _numpy(cos), _numpy(sin)


def observe_tables(rotary_cls: type, config: Any, obs: Observation) -> Any:
    rotary = rotary_cls(config=config)
    positions = table_positions(config)
    params = getattr(config, "rope_parameters", None) or {}
    layer_types: list[str | None] = [None]
    if "layer_type" in inspect.signature(rotary.forward).parameters:
        layer_types = list(dict.fromkeys(getattr(config, "layer_types", None) or
                                         [k for k in params if isinstance(params[k], dict)]))
    for layer_type in layer_types:
        entry: dict[str, Any] = {"layer_type": layer_type, "positions": positions}
        suffix = "" if layer_type is None else f"{layer_type}_"
        inv = getattr(rotary, f"{suffix}inv_freq", None)
        if inv is None:
            inv = getattr(rotary, "inv_freq", None)
        if inv is not None:
            entry["inv_freq"] = _numpy(inv)
        scaling = getattr(rotary, f"{suffix}attention_scaling",
                          getattr(rotary, "attention_scaling", None))
        if isinstance(scaling, (int, float)) or (scaling is not None and hasattr(scaling, "item")):
            entry["attention_scaling"] = float(scaling)
        try:
            entry["cos"], entry["sin"] = _call_rotary(rotary, config, positions, layer_type)
        except IndexError:  # a fixed table of max_position_embeddings rows (GPT-J, CodeGen)
            limit = int(getattr(config, "max_position_embeddings", 0) or 0)
            entry["positions"] = [p for p in positions if p < limit]
            try:
                entry["cos"], entry["sin"] = _call_rotary(rotary, config, entry["positions"],
                                                          layer_type)
                entry["note"] = f"a table of {limit} positions (max_position_embeddings)"
            except Exception as exc:
                obs.problems[f"tables[{layer_type}]"] = last_frame(exc)
        except Exception as exc:
            obs.problems[f"tables[{layer_type}]"] = last_frame(exc)
        obs.tables.append(entry)
    return rotary


# -- the forward ---------------------------------------------------------------------------------
def _model_class(module: Any, config: Any) -> type:
    from transformers import PreTrainedModel

    candidates = []
    for name, value in vars(module).items():
        if not (isinstance(value, type) and issubclass(value, PreTrainedModel)):
            continue
        if value.__module__ != module.__name__ or not name.endswith("Model"):
            continue
        if name.endswith("PreTrainedModel"):
            continue
        wanted = getattr(value, "config_class", None)
        if wanted is type(config):
            candidates.append(value)
    if not candidates:
        raise LookupError(f"no *Model class of {module.__name__} takes "
                          f"{type(config).__name__}")
    return min(candidates, key=lambda c: (("Text" not in c.__name__) and len(candidates) > 1,
                                          len(c.__name__)))


def _layer_list(model: Any, n: int) -> Any:
    import torch

    lists = [(name, m) for name, m in model.named_modules()
             if isinstance(m, torch.nn.ModuleList) and len(m) == n]
    named = [m for name, m in lists if name.split(".")[-1] in ("layers", "layer", "h", "blocks")]
    return (named or [m for _, m in lists] or [None])[0]


@contextlib.contextmanager
def _recording(module: Any, calls: list[dict[str, Any]], state: dict[str, Any]) -> Iterator[
        list[str]]:
    import torch

    patched = {}
    for name, value in list(vars(module).items()):
        if name.startswith("apply_rotary") and callable(value) and not isinstance(value, type) \
                and not OTHER_MODALITY.search(name.replace("apply_rotary", "")):
            patched[name] = value

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def recorder(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            outs = [out] if isinstance(out, torch.Tensor) else [
                o for o in (out if isinstance(out, (tuple, list)) else []) if
                isinstance(o, torch.Tensor)]
            ins = [a for a in args if isinstance(a, torch.Tensor)][:len(outs)]
            calls.append({"function": name, "layer": state.get("layer"),
                          "phase": state.get("phase"),
                          "pairs": [(_numpy(a), _numpy(b)) for a, b in zip(ins, outs,
                                                                           strict=False)]})
            return out
        return recorder

    for name, fn in patched.items():
        setattr(module, name, wrap(name, fn))
    try:
        yield list(patched)
    finally:
        for name, fn in patched.items():
            setattr(module, name, fn)


def observe_forward(module: Any, config: Any, obs: Observation) -> None:
    import torch

    cls = _model_class(module, config)
    with torch.device("meta"):
        size = sum(p.numel() for p in cls(config).parameters())
    if size > MAX_PARAMETERS:
        raise ValueError(f"{cls.__name__} of the shrunk config still has {size:,} parameters "
                         "(a size this sweep does not know how to shrink)")
    model = cls(config).eval().float()
    n = int(getattr(config, "num_hidden_layers", 0) or 0)
    obs.layers = n
    state: dict[str, Any] = {}
    layers = _layer_list(model, n)
    hooks = []
    if layers is not None:
        for i, layer in enumerate(layers):
            hooks.append(layer.register_forward_pre_hook(
                lambda _m, _a, i=i: state.__setitem__("layer", i)))
    vocab = int(getattr(config, "vocab_size", 256) or 256)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, min(vocab, 256), (2, SEQ), generator=gen)
    mask = torch.tensor(PREFILL_MASK)
    positions = torch.tensor(PREFILL_POSITIONS)
    try:
        with _recording(module, obs.calls, state) as names, torch.no_grad():
            if not names:
                obs.wiring = f"{module.__name__} has no apply_rotary* function to record"
                return
            state["phase"] = "prefill"
            out = model(input_ids=ids, attention_mask=mask, position_ids=positions,
                        use_cache=True)
            key = "cache" if "cache" in inspect.signature(model.forward).parameters \
                else "past_key_values"
            past = getattr(out, key, None) or getattr(out, "past_key_values", None)
            if past is None:
                obs.wiring = f"recorded {', '.join(names)}; no KV cache returned"
                return
            state["phase"], state["layer"] = "decode", None
            step = torch.randint(3, min(vocab, 256), (2, 1), generator=gen)
            model(input_ids=step, attention_mask=torch.cat([mask, torch.ones(2, 1,
                                                                             dtype=mask.dtype)],
                                                           1),
                  position_ids=torch.tensor(DECODE_POSITIONS), use_cache=True, **{key: past})
            obs.wiring = f"recorded {', '.join(names)}"
    finally:
        for hook in hooks:
            hook.remove()


# -- biases --------------------------------------------------------------------------------------
def observe_alibi(module: Any, obs: Observation) -> None:
    import torch

    heads = 12  # not a power of two: the slope interleaving shows
    for name, fn in vars(module).items():
        if not (callable(fn) and "alibi" in name and name.startswith("build")):
            continue
        params = list(inspect.signature(fn).parameters)
        with torch.no_grad():
            if params[:2] == ["attention_mask", "num_heads"]:  # BLOOM, Falcon
                mask = torch.ones(1, 7, dtype=torch.long)
                bias = fn(mask, heads, torch.float32)
                obs.biases.append({"kind": "alibi", "function": name, "form": "key_only",
                                   "heads": heads, "k_len": 7,
                                   "bias": _numpy(bias).reshape(heads, 1, 7)})
            elif params[:2] == ["num_heads", "sequence_length"]:  # MPT
                bias = fn(heads, 7, alibi_bias_max=8)
                obs.biases.append({"kind": "alibi", "function": name, "form": "key_only_mpt",
                                   "heads": heads, "k_len": 7,
                                   "bias": _numpy(bias).reshape(heads, 1, 7)})


def observe_t5(module: Any, obs: Observation) -> None:
    """Every attention class with ``compute_bias`` and a ``relative_attention_bias`` table."""
    import torch

    configs = _config_classes(module)
    for name, cls in vars(module).items():
        if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)
                and cls.__module__ == module.__name__ and hasattr(cls, "compute_bias")):
            continue
        config_cls = _annotated_config(cls, module) or (configs[0] if configs else None)
        if config_cls is None:
            continue
        decoder_only = "bidirectional=False" in inspect.getsource(cls.compute_bias)
        for decoder in (True,) if decoder_only else (False, True):
            config = tiny_config(config_cls)
            config.is_decoder = decoder
            try:
                layer = cls(config, has_relative_attention_bias=True, layer_idx=0)
            except TypeError:
                layer = cls(config, has_relative_attention_bias=True)
            table = layer.relative_attention_bias.weight
            with torch.no_grad():
                table.copy_(torch.randn(table.shape, generator=torch.Generator().manual_seed(1)))
                args = inspect.signature(layer.compute_bias).parameters
                rows = []
                for q_len, k_len, offset in ((5, 5, 0), (1, 9, 8), (3, 200, 150)):
                    kw = {}
                    if offset and "past_seen_tokens" in args:
                        kw["past_seen_tokens"] = offset
                    elif offset and "cache_position" in args:
                        kw["cache_position"] = torch.arange(offset, offset + q_len)
                    elif offset:
                        continue
                    bias = layer.compute_bias(q_len, k_len, **kw)
                    rows.append({"q_len": q_len, "k_len": k_len, "offset": offset,
                                 "bias": _numpy(bias)})
            obs.biases.append({
                "kind": "t5", "function": f"{name}.compute_bias", "decoder": decoder,
                "bidirectional": bool(getattr(layer, "is_decoder", decoder)) is False,
                "num_buckets": int(layer.relative_attention_num_buckets),
                "max_distance": int(getattr(layer, "relative_attention_max_distance", 128)),
                "table": _numpy(table), "rows": rows})
        return  # one attention class per module


BUCKET_FUNCTIONS = ("relative_position_bucket", "_relative_position_bucket", "_position_bucket")


def observe_buckets(module: Any, obs: Observation) -> None:
    """T5-style bucket functions of a module (module-level, static or instance methods that
    do not use ``self``) on distances -300..300."""
    import torch

    places = [(name, vars(module).get(name)) for name in BUCKET_FUNCTIONS]
    for cls_name, cls in vars(module).items():
        if isinstance(cls, type) and cls.__module__ == module.__name__:
            places += [(f"{cls_name}.{n}", cls.__dict__.get(n)) for n in BUCKET_FUNCTIONS]
    for name, fn in places:
        if fn is None:
            continue
        bound: Any = fn.__func__ if isinstance(fn, staticmethod) else fn
        if not callable(bound):
            continue
        params = list(inspect.signature(bound).parameters)
        args = [None] if params and params[0] == "self" else []
        if "relative_position" not in params:
            continue
        rel = torch.arange(-300, 301, dtype=torch.long)
        for bidirectional in ((True, False) if "bidirectional" in params else (None,)):
            kwargs = {} if bidirectional is None else {"bidirectional": bidirectional}
            try:
                out = bound(*args, rel, **kwargs)
            except Exception as exc:
                obs.problems[f"bucket:{name}"] = last_frame(exc)
                break
            obs.biases.append({"kind": "bucket", "function": name,
                               "bidirectional": bidirectional, "relative": rel.numpy().copy(),
                               "buckets": out.detach().numpy().astype(np.int64)})


# -- one family ----------------------------------------------------------------------------------
def observe(family: Family) -> Observation:
    """What the family computes (see the module docstring); never raises."""
    import torch

    torch.manual_seed(0)
    obs = Observation(family.name)
    pick = _pick_rotary(family)
    if pick is None and family.rotary:
        obs.problems["rotary"] = ("only rotary classes of other modalities: " + ", ".join(
            c for _, c in family.rotary))
    if pick is not None:
        module_name, class_name = pick
        obs.rotary_class = class_name
        try:
            module = importlib.import_module(module_name)
            rotary_cls = getattr(module, class_name)
            config_cls = choose_config_class(rotary_cls, module)
            obs.config_class = config_cls.__name__
            config = tiny_config(config_cls)
            obs.config = config_dict(config)
        except Exception as exc:  # a family that does not build
            obs.problems["config"] = last_frame(exc)
        else:
            try:
                observe_tables(rotary_cls, config, obs)
            except Exception as exc:
                obs.problems["tables"] = last_frame(exc)
            try:
                observe_forward(module, config, obs)
            except Exception as exc:
                obs.problems["forward"] = last_frame(exc)
    for module_name, kind in family.biases:
        try:
            module = importlib.import_module(module_name)
            (observe_alibi if kind == "alibi" else observe_t5)(module, obs)
            if kind == "t5":
                observe_buckets(module, obs)
        except Exception as exc:
            obs.problems[f"bias:{kind}"] = last_frame(exc)
    return obs


def preload() -> None:
    """Import what every family shares once, before the forks (a child then imports only its
    family's modules)."""
    import torch  # noqa: F401
    import transformers
    import transformers.modeling_rope_utils
    import transformers.modeling_utils
    import transformers.models.llama.modeling_llama  # noqa: F401


def _child(family: Family, pipe: Any) -> None:
    import torch

    torch.set_num_threads(1)
    try:
        try:
            obs = observe(family)
        except Exception as exc:
            obs = Observation(family.name, problems={"observe": last_frame(exc)})
        pipe.send(obs)
    finally:
        pipe.close()


def observe_isolated(family: Family, timeout: float = TIMEOUT) -> Observation:
    """:func:`observe` in a forked process, so that a family that exhausts memory or hangs
    costs its own verdict only."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(family, send), daemon=True)
    process.start()
    send.close()
    obs: Observation | None = None
    why = ""
    try:
        if receive.poll(timeout):
            obs = receive.recv()
        else:
            why = f"no result in {timeout:.0f} s"
    except EOFError:
        pass
    finally:
        process.join(5.0)
        if process.is_alive():
            process.kill()
            process.join()
        receive.close()
    if obs is None:
        code = process.exitcode
        why = why or (f"the process died (exit code {code}"
                      + (": killed, likely out of memory)" if code == -9 else ")"))
        obs = Observation(family.name, problems={"process": why})
    return obs


def versions() -> dict[str, str]:
    import torch
    import transformers

    return {"transformers": transformers.__version__, "torch": torch.__version__,
            "python": sys.version.split()[0]}
