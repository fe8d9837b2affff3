"""``posenc translate``: print one rope configuration in another ecosystem's terms."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ParameterError
from . import (
    TARGETS,
    VLLM_VERSION,
    freq_factors_summary,
    from_ggml,
    from_vllm,
    rope_layers,
    translate,
)
from .named import NAMED

SOURCES = ("transformers", "ggml", "vllm")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", nargs="?", type=Path,
                   help="a transformers config.json (or, with --from ggml/vllm, their parameters "
                        "as JSON)")
    p.add_argument("--from", dest="source", choices=SOURCES, default="transformers")
    p.add_argument("--to", dest="target", choices=TARGETS, required=True)
    p.add_argument("--named", choices=sorted(NAMED),
                   help="a published model configuration instead of a file")
    p.add_argument("--mode", help="ggml: force a rope mode (normal, neox, mrope, imrope)")
    p.add_argument("--n-ctx", type=int, help="ggml: the context llama.cpp allocates (picks "
                                             "LongRoPE's factors)")
    p.add_argument("--max-positions", type=int, default=4096,
                   help="onnx: rows of the cos/sin caches (default 4096)")
    p.add_argument("--seq-len", type=int, help="onnx: the length dynamic/LongRoPE are baked for")
    p.add_argument("--json", action="store_true", help="print JSON with every value")


def _load(args: argparse.Namespace) -> dict[str, Any]:
    if args.named:
        return NAMED[args.named]
    if args.config is None:
        raise ParameterError("give a config file or --named MODEL")
    try:
        return json.loads(args.config.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ParameterError(f"cannot read {args.config}: {exc}") from None


def _options(args: argparse.Namespace) -> dict[str, Any]:
    if args.target == "ggml":
        return {k: v for k, v in (("mode", args.mode), ("n_ctx", args.n_ctx)) if v is not None}
    if args.target == "onnx":
        return {"max_positions": args.max_positions, "seq_len": args.seq_len}
    return {}


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def _summary(key: str, value: Any) -> str:
    if key == "freq_factors":
        return freq_factors_summary(value)
    if isinstance(value, np.ndarray):
        return (f"{key}: float64 {list(value.shape)}, row 1 starts "
                f"{', '.join(f'{v:.6g}' for v in value[min(1, len(value) - 1), :3])}")
    return f"{key}: {json.dumps(value)}"


def main_args(args: argparse.Namespace) -> int:
    data = _load(args)
    if args.source != "transformers":
        if args.target != "transformers":
            raise ParameterError(f"--from {args.source} translates to transformers only")
        keyed = data if data and all(isinstance(v, dict) for v in data.values()) \
            and "rope_parameters" not in data else {"all": data}
        back = {t: from_ggml(d, head_dim=d.get("head_dim")) if args.source == "ggml"
                else from_vllm(d) for t, d in keyed.items()}
        print(json.dumps(back, indent=2))
        return 0
    result = translate(data, args.target, **_options(args))
    if args.json:
        print(json.dumps({t: {k: _plain(v) for k, v in out.items()}
                          for t, out in result.items()}, indent=2))
        return 0
    layers = rope_layers(data)
    target = f"vllm {VLLM_VERSION}" if args.target == "vllm" else args.target
    for layer_type, out in result.items():
        print(f"[{layer_type}] transformers -> {target}")
        for key, value in out.items():
            print(f"  {_summary(key, value)}")
        for note in layers[layer_type].notes:
            print(f"  note: {note}")
    return 0
