"""``posenc translate``: print one rope configuration in another ecosystem's terms."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from .. import params
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
from .ggml import MODES as GGML_MODES
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
    p.add_argument("--mode", choices=GGML_MODES,
                   help="ggml: force a rope mode (normal, neox, mrope, imrope)")
    p.add_argument("--n-ctx", type=params.option("int", minimum=1),
                   help="ggml: the context llama.cpp allocates (picks LongRoPE's factors)")
    p.add_argument("--max-positions", type=params.option("int", minimum=1),
                   help=f"onnx: rows of the cos/sin caches (default {MAX_POSITIONS})")
    p.add_argument("--seq-len", type=params.option("int", minimum=1),
                   help="onnx: the length dynamic/LongRoPE are baked for")
    p.add_argument("--json", action="store_true", help="print JSON with every value")


def _load(args: argparse.Namespace) -> dict[str, Any]:
    if args.named and args.config is not None:
        raise ParameterError(f"give a config file ({args.config}) or --named {args.named}, "
                             "not both")
    if args.named:
        return NAMED[args.named]
    if args.config is None:
        raise ParameterError("give a config file or --named MODEL")
    try:
        return json.loads(args.config.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ParameterError(f"cannot read {args.config}: {exc}") from None


# the options of one target, by target (dest, option)
TARGET_OPTIONS = {"ggml": (("mode", "--mode"), ("n_ctx", "--n-ctx")),
                  "onnx": (("max_positions", "--max-positions"), ("seq_len", "--seq-len"))}
MAX_POSITIONS = 4096


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The options given for the target; one given for another target (or with --from) is an
    error naming it, never ignored."""
    mine = TARGET_OPTIONS.get(args.target, ()) if args.source == "transformers" else ()
    for target, options in TARGET_OPTIONS.items():
        for dest, flag in options:
            if getattr(args, dest) is not None and (dest, flag) not in mine:
                where = (f"--to {target}" if args.source == "transformers"
                         else "--from transformers")
                raise ParameterError(f"{flag} {getattr(args, dest)} applies to {where} only, "
                                     f"not to --from {args.source} --to {args.target}")
    out = {dest: getattr(args, dest) for dest, _ in mine if getattr(args, dest) is not None}
    if args.target == "onnx" and args.source == "transformers":
        out.setdefault("max_positions", MAX_POSITIONS)
    return out


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
    options = _options(args)
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
    result = translate(data, args.target, **options)
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
