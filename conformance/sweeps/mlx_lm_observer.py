"""What mlx-lm computes for one family (``posenc sweep mlx-lm``; runs in a forked process of
the engine's environment): the family's shrunk transformers config as a hub ``config.json``
carries it, mlx-lm's own ``Model`` for it, and the rotations its attention layers make.

Rotations are recorded where mlx-lm makes them: each layer's rope module (``nn.RoPE``,
``Llama3RoPE``, ``YarnRoPE``, ``SuScaledRoPE``, a model's own class), and ``mx.fast.rope``
when a model calls it outside a module (NanoChat). A layer is known by its block's
``__call__``, patched for the forward only.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROPE_NAME = re.compile(r"rope|rotary", re.IGNORECASE)
BLOCK = re.compile(r"(?:^|\.)(?:layers|layer|h|blocks|block)\.(\d+)$")
PROMPT = (3, 5, 7, 11, 13, 17)  # the recorded prefill; the decode step is at offset 6
PREFILL = 8  # positions 0..7 of the direct application


# -- the config as a hub config.json has it ----------------------------------------------------
def hub_config(config: dict[str, Any]) -> dict[str, Any]:
    """transformers 5's ``rope_parameters`` spelled also as the transformers 4 keys a hub
    ``config.json`` carries and mlx-lm's ``ModelArgs`` read: ``rope_theta``,
    ``rope_scaling`` (null when unscaled; with ``type`` and ``rope_type``),
    ``partial_rotary_factor``, ``original_max_position_embeddings``, GPT-NeoX's
    ``rotary_emb_base`` and ``rotary_pct``, ``head_dim``, Gemma 4's ``global_head_dim``
    (transformers 5.24 keeps it in ``per_layer_config``) and, for per-layer-type parameters
    (Gemma 3), ``rope_local_base_freq``. Keys the config has already are kept."""
    out = with_sizes(config, config)
    out.setdefault("rope_scaling", None)
    params = config.get("rope_parameters")
    if not isinstance(params, dict) or not params:
        return out
    if all(isinstance(v, dict) for v in params.values()):
        local = params.get("sliding_attention") or {}
        if "rope_theta" in local:
            out.setdefault("rope_local_base_freq", local["rope_theta"])
        params = params.get("full_attention") or next(iter(params.values()))
    if "rope_theta" in params:
        out.setdefault("rope_theta", params["rope_theta"])
        out.setdefault("rotary_emb_base", params["rope_theta"])
    out.setdefault("rotary_pct", params.get("partial_rotary_factor", 1.0))
    for key in ("partial_rotary_factor", "original_max_position_embeddings"):
        if key in params:
            out.setdefault(key, params[key])
    rest = {k: v for k, v in params.items() if k not in ("rope_theta", "partial_rotary_factor")}
    kind = rest.get("rope_type", rest.get("type", "default"))
    if kind != "default" and out["rope_scaling"] is None:
        out["rope_scaling"] = {**rest, "type": kind, "rope_type": kind}
    return out


THETA_PROBE = 1.375  # the saved config's rope_theta, as a multiple of the family's own


def saved_config(config: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The family's shrunk config with its rope_theta made distinct (x ``THETA_PROBE``, so an
    engine's default base cannot match it by chance; the per-layer bases the config derived
    from it scaled alike), as ``(config.json as transformers'
    ``save_pretrained`` writes it, the config dict posenc reads)``; None where the config class
    keeps no ``rope_parameters`` (nothing moved for transformers 5 to write)."""
    import json
    import tempfile

    from posenc.conformance.sweeps.transformers_configs import config_dict

    params = getattr(config, "rope_parameters", None)
    if not isinstance(params, dict) or not params:
        return None
    nested = all(isinstance(v, dict) for v in params.values())
    for part in (params.values() if nested else [params]):
        part["rope_theta"] = float(part.get("rope_theta", 10000.0)) * THETA_PROBE
    for name, value in list(vars(config).items()):  # the bases a config derived from it
        if "theta" in name and name != "rope_parameters":  # (MuseGlimmer's layer_rope_theta)
            scaled = [v * THETA_PROBE if isinstance(v, (int, float)) else v
                      for v in (value if isinstance(value, list) else [value])]
            if all(isinstance(v, (int, float)) for v in scaled):
                setattr(config, name, scaled if isinstance(value, list) else scaled[0])
    with tempfile.TemporaryDirectory() as folder:
        config.save_pretrained(folder)
        with open(Path(folder) / "config.json") as handle:
            saved = json.load(handle)
    return saved, config_dict(config)


def default_bases(args_cls: type) -> list[float]:
    """The rope bases ``args_cls`` (a model's ``ModelArgs``) falls back on: the defaults of
    its fields named like rope_theta."""
    import dataclasses

    return [float(f.default) for f in dataclasses.fields(args_cls)
            if "theta" in f.name and isinstance(f.default, (int, float))]


ROPE_FIELD = re.compile(r"rope|rotary|partial_rotary_factor|original_max_position")


def with_sizes(hub: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """``hub`` with the head sizes a hub config.json states and ``config`` (the config's
    dict) leaves implicit: ``head_dim`` (hidden / heads) and Gemma 4's ``global_head_dim``
    (transformers 5.24 keeps it in ``per_layer_config``). Sizes, not rope: a checkpoint's
    weights fix them."""
    out = dict(hub)
    heads = config.get("num_attention_heads")
    if out.get("head_dim") is None and heads and config.get("hidden_size"):
        out["head_dim"] = int(config["hidden_size"]) // int(heads)
    per_layer = config.get("per_layer_config") or {}
    types = config.get("layer_types") or []
    for index, values in per_layer.items():  # transformers 5.24's Gemma 4: the global head
        if isinstance(values, dict) and "head_dim" in values and str(index).isdigit() and \
                int(index) < len(types) and types[int(index)] == "full_attention":
            out.setdefault("global_head_dim", values["head_dim"])
    return out


def with_config_fields(hub: dict[str, Any], args_cls: type, config: Any,
                       rope_from_object: bool = True) -> dict[str, Any]:
    """``hub`` with the ``args_cls`` fields it lacks read from the transformers config object
    by that name, where the object has them: its ``attribute_map`` aliases (``num_experts``
    for ``num_local_experts``) and the sizes a config class keeps out of ``to_dict()``
    (Gemma 4's ``global_head_dim``). ``rope_from_object`` False: no rope field is taken from
    the object (what the engine reads of the rope is then the JSON's alone)."""
    import dataclasses

    out = dict(hub)
    for f in dataclasses.fields(args_cls):
        if f.name in out or (not rope_from_object and ROPE_FIELD.search(f.name)):
            continue
        try:
            value = getattr(config, f.name)
        except Exception:  # the engine's default, or its own error
            continue
        if value is not None or (f.default is dataclasses.MISSING
                                 and f.default_factory is dataclasses.MISSING):
            out[f.name] = value
    return out


def tiny(family: Any) -> tuple[Any, dict[str, Any] | None, str]:
    """(the family's shrunk transformers config, its dict, why there is none)."""
    from posenc.conformance.sweeps.transformers_configs import (
        choose_config_class,
        config_dict,
        pick_rotary,
        tiny_config,
    )

    pick = pick_rotary(family)
    if pick is None:
        return None, None, ("no rotary embedding in transformers' modeling code (an ALiBi or "
                            "T5 bias family, or another modality's rotary): this sweep "
                            "checks rotary embeddings")
    module = importlib.import_module(pick[0])
    config = tiny_config(choose_config_class(getattr(module, pick[1]), module))
    return config, config_dict(config), ""


# -- recording -----------------------------------------------------------------------------------
def to_numpy(a: Any) -> Any:
    import mlx.core as mx

    if isinstance(a, mx.array):
        if a.dtype in (mx.bfloat16, mx.float16):
            a = a.astype(mx.float32)
        return np.array(a, dtype=np.float64 if mx.issubdtype(a.dtype, mx.floating) else None)
    return a


class Recording:
    """The rotations of a forward: ``calls`` (layer, phase, x, y, offset, via) and, per layer,
    a replay ``(x, offset) -> y`` of the first rotation (the module, or ``mx.fast.rope``
    with the arguments the model gave it)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.replays: dict[int, Callable[[Any, int], Any]] = {}
        self.layer: int | None = None
        self.phase = "prefill"
        self.inside = 0  # > 0: within a recorded rope module

    def add(self, layer: int | None, x: Any, y: Any, offset: Any, via: str,
            replay: Callable[[Any, int], Any], dims: Any) -> None:
        if layer is None:
            return
        self.calls.append({"layer": layer, "phase": self.phase, "x": to_numpy(x),
                           "y": to_numpy(y), "via": via,
                           "dims": dims if isinstance(dims, int) else None,
                           "offset": np.asarray(to_numpy(offset)).reshape(-1).astype(np.int64)})
        self.replays.setdefault(layer, replay)


class ModuleRecorder:
    """A rope module's stand-in that records each call."""

    def __init__(self, inner: Any, recording: Recording, layer: int):
        self.inner, self.recording, self.index = inner, recording, layer

    def __call__(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        self.recording.inside += 1
        try:
            y = self.inner(x, *args, **kwargs)
        finally:
            self.recording.inside -= 1
        offset = kwargs.get("offset", args[0] if args else 0)
        inner = self.inner
        self.recording.add(self.index, x, y, offset, type(inner).__name__,
                           lambda x, o: inner(x, offset=o), getattr(inner, "dims", None))
        return y

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def rope_modules(model: Any) -> dict[int, tuple[Any, str, Any]]:
    """layer index -> (the module holding the rope, its attribute name, the rope module)."""
    import mlx.nn as nn

    found: dict[int, tuple[Any, str, Any]] = {}
    blocks = block_indices(model)
    for name, module in model.named_modules():
        index = next((i for prefix, i in blocks.items() if name.startswith(prefix + ".")), None)
        if index is None:
            continue
        for key, child in module.children().items():
            if isinstance(child, nn.Module) and ROPE_NAME.search(key + type(child).__name__):
                found.setdefault(index, (module, key, child))
    return found


def block_indices(model: Any) -> dict[str, int]:
    """The dotted name of each transformer block -> its layer index."""
    out = {}
    for name, _ in model.named_modules():
        match = BLOCK.search(name)
        if match:
            out[name] = int(match.group(1))
    return out


def _patched_fast_rope(recording: Recording) -> Callable[..., Any]:
    import mlx.core as mx

    original = mx.fast.rope

    def rope(x: Any, *args: Any, **kwargs: Any) -> Any:
        y = original(x, *args, **kwargs)
        if recording.inside == 0:
            recording.add(recording.layer, x, y, kwargs.get("offset", 0), "mx.fast.rope",
                          lambda x2, o: original(x2, *args, **{**kwargs, "offset": o}),
                          args[0] if args else kwargs.get("dims"))
        return y

    return rope


def record_forward(model: Any) -> tuple[Recording, str]:
    """The rotations of a prefill and a KV-cache decode step ('' or why the forward failed)."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    recording = Recording()
    ropes = rope_modules(model)
    names = block_indices(model)
    blocks = {id(m): names[n] for n, m in model.named_modules() if n in names}
    classes = {type(m) for n, m in model.named_modules() if id(m) in blocks}
    saved = {cls: cls.__call__ for cls in classes}

    def enter(original: Callable[..., Any]) -> Callable[..., Any]:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            outer, recording.layer = recording.layer, blocks.get(id(self), recording.layer)
            try:
                return original(self, *args, **kwargs)
            finally:
                recording.layer = outer
        return call

    for index, (holder, key, rope) in ropes.items():
        object.__setattr__(holder, key, ModuleRecorder(rope, recording, index))
    for cls, original in saved.items():
        cls.__call__ = enter(original)
    fast = mx.fast.rope
    mx.fast.rope = _patched_fast_rope(recording)
    try:
        cache = make_prompt_cache(model)
        mx.eval(model(mx.array([list(PROMPT)]), cache=cache))
        recording.phase = "decode"
        mx.eval(model(mx.array([[19]]), cache=cache))
        return recording, ""
    except Exception as exc:
        from posenc.conformance.sweeps.transformers_observation import last_frame

        return recording, last_frame(exc)
    finally:
        mx.fast.rope = fast
        for cls, original in saved.items():
            cls.__call__ = original
        for holder, key, _ in ropes.values():
            object.__delattr__(holder, key)


def apply(replay: Callable[[Any, int], Any], width: int, offsets: list[int],
          dims: int | None) -> list[dict]:
    """A layer's rotation replayed at a prefill of PREFILL positions and at decode offsets."""
    import mlx.core as mx

    rng = np.random.default_rng(0)
    out = []
    for phase, length, offset in [("prefill", PREFILL, 0), *(("decode", 1, o) for o in offsets)]:
        x = rng.standard_normal((1, 2, length, width)).astype(np.float32)
        y = replay(mx.array(x), offset)
        out.append({"phase": f"{phase} at {offset}", "x": x.astype(np.float64),
                    "y": to_numpy(y), "offset": np.array([offset]), "dims": dims})
    return out
