"""The ALiBi and T5-style biases of a transformers family, as ``posenc sweep transformers``
observes them (:mod:`posenc.conformance.sweeps.transformers_families`)."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from .transformers_configs import annotated_config, config_classes, tiny_config
from .transformers_observation import Observation, last_frame, to_numpy


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
                                   "bias": to_numpy(bias).reshape(heads, 1, 7)})
            elif params[:2] == ["num_heads", "sequence_length"]:  # MPT
                bias = fn(heads, 7, alibi_bias_max=8)
                obs.biases.append({"kind": "alibi", "function": name, "form": "key_only_mpt",
                                   "heads": heads, "k_len": 7,
                                   "bias": to_numpy(bias).reshape(heads, 1, 7)})


def observe_t5(module: Any, obs: Observation) -> None:
    """Every attention class with ``compute_bias`` and a ``relative_attention_bias`` table."""
    import torch

    configs = config_classes(module)
    for name, cls in vars(module).items():
        if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)
                and cls.__module__ == module.__name__ and hasattr(cls, "compute_bias")):
            continue
        config_cls = annotated_config(cls, module) or (configs[0] if configs else None)
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
                                 "bias": to_numpy(bias)})
            obs.biases.append({
                "kind": "t5", "function": f"{name}.compute_bias", "decoder": decoder,
                "bidirectional": bool(getattr(layer, "is_decoder", decoder)) is False,
                "num_buckets": int(layer.relative_attention_num_buckets),
                "max_distance": int(getattr(layer, "relative_attention_max_distance", 128)),
                "table": to_numpy(table), "rows": rows})
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
