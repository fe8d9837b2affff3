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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .transformers_biases import observe_alibi, observe_buckets, observe_t5
from .transformers_configs import (
    OTHER_MODALITY,
    choose_config_class,
    config_dict,
    pick_rotary,
    text_config_class,
    tiny_config,
)
from .transformers_observation import TIMEOUT, Family, Observation, last_frame, run_forked, to_numpy

ROTARY_CLASS = re.compile(r"^class (\w*RotaryEmbedding\w*)\(", re.MULTILINE)
ALIBI = re.compile(r"^def (build_\w*alibi\w*|\w*alibi\w*)\(", re.MULTILINE)
T5_BUCKET = re.compile(r"def _?relative_position_bucket\(")

SEQ = 6
PREFILL_MASK = ((0, 0, 1, 1, 1, 1), (1, 1, 1, 1, 1, 1))  # the first row is left-padded
# generate()'s position ids: cumsum(mask) - 1, pads at 1
PREFILL_POSITIONS = ((1, 1, 0, 1, 2, 3), (0, 1, 2, 3, 4, 5))
DECODE_POSITIONS = ((4,), (6,))

MAX_PARAMETERS = 20_000_000


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
        rotary, biases, sliced = [], [], ""
        for source in sorted(folder.glob("modeling_*.py")):
            text = source.read_text(encoding="utf-8")
            module = f"transformers.models.{folder.name}.{source.stem}"
            rotary += [(module, c) for c in ROTARY_CLASS.findall(text)]
            if "qk_rope_head_dim" in text:
                sliced = sliced or module
            if ALIBI.search(text):
                biases.append((module, "alibi"))
            if T5_BUCKET.search(text) or re.search(r"relative_attention_bias\b", text):
                biases.append((module, "t5"))
        text_rotary = [c for _, c in rotary if not OTHER_MODALITY.search(
            c.replace("RotaryEmbedding", ""))]
        sliced = "" if text_rotary else sliced
        if rotary or biases or sliced:
            families.append(Family(folder.name, tuple(rotary), tuple(biases), sliced))
    return families



def unknown_families(names: list[str] | None) -> str | None:
    """The error for ``--family`` names no family of the installed transformers has (None:
    every name is known); the transformers sweep and the engine sweeps refuse them alike."""
    unknown = sorted(set(names or []) - {f.name for f in discover()})
    if not unknown:
        return None
    return (f"posenc: error: no family with a rotary embedding or a relative bias named "
            f"{', '.join(unknown)} in {transformers_root()}")

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
    return to_numpy(cos), to_numpy(sin)


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
            entry["inv_freq"] = to_numpy(inv)
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
                          "pairs": [(to_numpy(a), to_numpy(b)) for a, b in zip(ins, outs,
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


def _count_rotary_calls(model: Any, obs: Observation) -> list[Any]:
    """Forward hooks counting the calls of the model's text rotary modules."""
    def count(*_: Any) -> None:
        obs.rotary_calls += 1

    return [m.register_forward_hook(count) for m in model.modules()
            if "Rotary" in type(m).__name__
            and not OTHER_MODALITY.search(type(m).__name__.replace("RotaryEmbedding", ""))]


def observe_unrotated(family: Family, obs: Observation) -> None:
    """A rope_slice family's text model run as the rotated ones are: what it rotates."""
    module = importlib.import_module(family.rope_slice)
    config = tiny_config(text_config_class(module))
    text = Observation(family.name)
    observe_forward(module, config, text, bare=True)
    obs.unrotated = {"config_class": type(config).__name__, "layers": text.layers,
                     "rotary_calls": text.rotary_calls, "apply_calls": len(text.calls),
                     "wiring": text.wiring,
                     "qk_rope_head_dim": getattr(config, "qk_rope_head_dim", None)}


def observe_forward(module: Any, config: Any, obs: Observation, *, bare: bool = False) -> None:
    """``bare``: run the forward even where the module has no apply_rotary* to record."""
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
    hooks = _count_rotary_calls(model, obs)
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
            if not names and not bare:
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
            obs.wiring = f"recorded {', '.join(names) or 'no apply_rotary*: the module has none'}"
    finally:
        for hook in hooks:
            hook.remove()


# -- one family ----------------------------------------------------------------------------------
def observe(family: Family) -> Observation:
    """What the family computes (see the module docstring); never raises."""
    import torch

    torch.manual_seed(0)
    obs = Observation(family.name)
    pick = pick_rotary(family)
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
    if family.rope_slice and "vocab_size" not in obs.config:
        try:
            observe_unrotated(family, obs)
        except Exception as exc:
            obs.problems["text model"] = last_frame(exc)
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


def _observe_quietly(family: Family) -> Observation:
    import torch

    torch.set_num_threads(1)
    try:
        return observe(family)
    except Exception as exc:
        return Observation(family.name, problems={"observe": last_frame(exc)})


def observe_isolated(family: Family, timeout: float = TIMEOUT) -> Observation:
    """:func:`observe` in a forked process, so that a family that exhausts memory or hangs
    costs its own verdict only."""
    try:
        return run_forked(_observe_quietly, family, timeout)
    except RuntimeError as exc:  # no result: the process hung or died
        return Observation(family.name, problems={"process": str(exc)})


def versions() -> dict[str, str]:
    import torch
    import transformers

    return {"transformers": transformers.__version__, "torch": torch.__version__,
            "python": sys.version.split()[0]}
