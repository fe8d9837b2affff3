"""``posenc check ENCODING TARGET``: :func:`posenc.conformance.check` from the command line."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from posenc import params
from posenc.errors import ParameterError

from .conformance import add_settings_argument

ADAPTERS = ("function", "apply", "cache", "frequencies", "alibi-tensor")


def add_arguments(p: argparse.ArgumentParser) -> None:
    # The same shape as other commands' option blocks (sweeps/command.py), not the same
    # options; the one it shares, --matmul-precision with posenc conformance, is shared code.
    p.add_argument("encoding", help="the spec the function implements (see `posenc list`)")
    p.add_argument("target", help="module:function or path/to/file.py:function (also an "
                                  "adapter or a Backend object)")
    p.add_argument("--adapter", choices=ADAPTERS, default="function",
                   help="the function's shape: function (posenc's inputs and parameters under "
                        "its own names; default), apply (q, k, cos, sin), cache (a cos/sin "
                        "builder), frequencies (config -> inv_freq, attention_factor, or a "
                        "ROPE_INIT_FUNCTIONS-style dict), alibi-tensor (BLOOM's "
                        "build_alibi_tensor)")
    p.add_argument("--map", action="append", default=[], metavar="POSENC=THEIRS",
                   help="a posenc parameter or input and the function's name for it, e.g. "
                        "base=theta, positions=position_ids (repeatable)")
    p.add_argument("--unsupported", action="append", default=[], metavar="NAME=VALUE",
                   help="a parameter value the function does not cover, written as in a spec "
                        "(layout=interleaved; base=[10, 500000.0] for several; '*' for every "
                        "value but the default); NAME may look into a dict "
                        "(scaling.rope_type=ntk, or rope_type=ntk at any depth) or be an "
                        "input's number of axes (positions.ndim=2: 1-D positions only). Decided "
                        "on the effective value: a check leaving the parameter out has the "
                        "spec's default. Such checks report unsupported (repeatable)")
    p.add_argument("--layout", choices=["half", "interleaved", "concat", "t2t"],
                   help="the pairing the function is fixed at (every adapter; apply/cache "
                        "default half, function: the spec's default unless it takes layout); "
                        "cases in the other pairing run through the feature permutation. "
                        "sinusoidal: the table's column layout (interleaved, concat, t2t); "
                        "the others run through a column gather")
    p.add_argument("--offset", metavar="NAME",
                   help="function: it takes an integer start NAME (offset, start_pos) instead of "
                        "positions; contiguous positions reach it as NAME=p0 (docs/conventions.md)")
    p.add_argument("--negative-offset", action="store_true",
                   help="function: a negative --offset start is legal for it")
    p.add_argument("--xpos-centre", choices=["torchscale", "rotary-embedding-torch"],
                   help="function (xpos, with --offset): where it centres the xPos scale; "
                        "converted to posenc's centre")
    p.add_argument("--axes", choices=["bhsd", "bshd"],
                   help="x as [batch, heads, seq, dim] (default) or [batch, seq, heads, dim] "
                        "(function; apply: the same as --x-layout)")
    p.add_argument("--cos-sin", choices=["full", "half"], default="full",
                   help="apply/cache: cos/sin of the rotary width (full, transformers) or half")
    p.add_argument("--x-layout", choices=["bhsd", "bshd"], default="bhsd",
                   help="apply: q/k as [batch, heads, seq, dim] (default) or [batch, seq, heads, "
                        "dim]")
    p.add_argument("--cos-layout", choices=["bsw", "sw"], default="bsw",
                   help="apply: cos/sin as [batch, seq, width] (default) or [seq, width]")
    p.add_argument("--args", default="q,k,cos,sin",
                   help="apply: what the function takes, in order (default q,k,cos,sin; x for "
                        "one tensor)")
    p.add_argument("--partial", action="store_true",
                   help="apply: the function rotates the first cos-width features only")
    p.add_argument("--framework", help="torch, jax, numpy, tensorflow (default: inferred)")
    p.add_argument("--precision", choices=["exact", "conventional", "reduced"], default="exact",
                   help="the profile checks must meet (every result is graded either way)")
    p.add_argument("--dtype", action="append", choices=["float64", "float32", "bfloat16",
                                                        "float16"], help="repeatable")
    p.add_argument("--mode", action="append", choices=["eager", "compiled"],
                   help="default eager")
    p.add_argument("--device", default="cpu")
    p.add_argument("--only", choices=["cases", "properties"])
    p.add_argument("--named", action="append", metavar="MODEL",
                   help="only the golden cases of a named model's published configuration, "
                        "e.g. llama-3.1-8b (repeatable; `posenc translate --help` lists them)")
    p.add_argument("--max-examples", type=params.option("int", minimum=1), default=25)
    add_settings_argument(p)
    p.add_argument("--json", metavar="PATH", help="write a JSON report")
    p.add_argument("-v", "--verbose", action="store_true", help="every failure and reason")


def pairs(items: list[str], flag: str, parse: bool) -> dict[str, Any]:
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ParameterError(f"{flag} {item!r}: expected NAME=VALUE")
        out[key.strip()] = (value if value == "*" else yaml.safe_load(value)) if parse else value
    return out


def _implementation(args: argparse.Namespace) -> Any:
    from posenc.backends import adapters, load_object
    from posenc.backends.adapter_base import check_pairing, unsupported_values
    from posenc.backends.backend import Backend

    target = load_object(args.target, what="function")
    names = pairs(args.map, "--map", parse=False)
    unsupported = pairs(args.unsupported, "--unsupported", parse=True)
    prebuilt = isinstance(target, Backend | adapters.Adapter)
    if (args.layout or args.axes) and (prebuilt or args.adapter in ("frequencies",
                                                                    "alibi-tensor")):
        raise ParameterError("--layout/--axes declare a rotary function's conventions (--adapter "
                             "function, apply or cache), not those of " + (
                                 "an adapter or Backend object" if prebuilt
                                 else f"--adapter {args.adapter}"))
    if (args.offset or args.xpos_centre or args.negative_offset) and (
            prebuilt or args.adapter != "function"):
        raise ParameterError("--offset/--xpos-centre/--negative-offset declare a function's "
                             "position conventions (--adapter function), not --adapter "
                             f"{args.adapter}'s or a prebuilt adapter's")
    if isinstance(target, Backend | adapters.Adapter):
        return target
    if not callable(target) and not (args.adapter == "frequencies" and isinstance(target, dict)):
        raise ParameterError(f"{args.target}: {type(target).__name__} is not a function")
    framework = {"framework": args.framework} if args.framework else {}
    if args.adapter in ("apply", "frequencies", "alibi-tensor") and (names or unsupported):
        raise ParameterError(f"--adapter {args.adapter} takes no --map or --unsupported (its "
                             "scope follows from what it is given: see --layout, --partial)")
    if args.layout is not None and "layout" in unsupported:
        check_pairing(args.layout, unsupported_values({"layout": unsupported["layout"]},
                                                      ["layout"], args.encoding),
                      f"--layout {args.layout}")
    layout = args.layout or "half"
    if args.adapter == "apply":
        return adapters.apply_rotary(target, layout=layout, cos_sin=args.cos_sin,
                                     args=tuple(a.strip() for a in args.args.split(",")),
                                     x_layout=args.axes or args.x_layout,
                                     cos_layout=args.cos_layout,
                                     partial=args.partial, **framework)
    if args.adapter == "cache":
        return adapters.cos_sin_cache(target, names, unsupported, layout=layout,
                                      width=args.cos_sin, **framework)
    if args.adapter == "frequencies":
        return adapters.frequency_function(target, label=args.target.rpartition(":")[2],
                                           **framework)
    if args.adapter == "alibi-tensor":
        return adapters.alibi_tensor(target, **framework)
    if args.encoding in ("t5_bucket", "deberta_bucket"):
        return adapters.bucket_function(target, names, unsupported, encoding=args.encoding,
                                        framework=args.framework)
    return adapters.function(args.encoding, target, names, unsupported,
                             framework=args.framework, layout=args.layout,
                             axes=args.axes or "bhsd", offset=args.offset,
                             centre=args.xpos_centre, negative_offset=args.negative_offset)


def main(args: argparse.Namespace) -> int:
    from posenc.conformance import check

    modes = args.mode or ["eager"]
    settings = {"matmul_precision": args.matmul_precision} if args.matmul_precision else {}
    report = check(_implementation(args), args.encoding, framework=args.framework,
                   precision=args.precision, dtypes=args.dtype, modes=modes,
                   device=args.device, max_examples=args.max_examples,
                   cases=args.only in (None, "cases"),
                   properties=args.only in (None, "properties"), named=args.named,
                   settings=settings, dtype_hint="--dtype")
    print(report.text(verbose=args.verbose))
    if args.json:
        report.to_json(args.json)
    if not report.in_scope:
        print("nothing was checked: every check is out of the function's scope", file=sys.stderr)
        return 1
    return 0 if report.passed else 1
