"""``posenc conformance``: its arguments and its run, from the command line."""

from __future__ import annotations

import argparse

from posenc import params
from posenc.errors import ParameterError

COUNT = params.option("int", minimum=1)  # a count of at least 1 (examples, workers)


def shard_option(text: str) -> str:
    """``--shard K/N``, checked while parsing (a usage error naming the option)."""
    from ..shard import parse_shard

    try:
        parse_shard(text)
    except ParameterError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--shard ")) from None
    return text


def add_settings_argument(p: argparse.ArgumentParser) -> None:
    from posenc.backends.backend import SETTINGS

    p.add_argument("--matmul-precision", choices=SETTINGS["matmul_precision"],
                   help="run the code under test at this float32 matmul precision (JAX's "
                        "default_matmul_precision, PyTorch's float32_matmul_precision; "
                        "TensorFlow: highest turns TF32 execution off, high on); by "
                        "default someone else's code runs at your framework's setting, "
                        "posenc's own JAX code at highest (docs/backends.md)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", action="append", metavar="B",
                   help="registered name, array-API module path, or module:attr (repeatable; "
                        "default: every installed backend)")
    p.add_argument("--encoding", action="append", metavar="ID", help="repeatable; default all")
    p.add_argument("--dtype", action="append", choices=["float64", "float32", "bfloat16",
                                                        "float16"], help="repeatable")
    p.add_argument("--mode", action="append", choices=["eager", "compiled"], help="repeatable")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--only", choices=["cases", "properties", "gradients"],
                   help="golden cases, properties or gradient checks only")
    p.add_argument("--max-examples", type=COUNT, default=None,
                   help="Hypothesis examples per property (derandomised; default 5 in the "
                        "standard tier, 25 with --exhaustive)")
    p.add_argument("--no-compile-cache", action="store_true",
                   help="compile afresh: no persistent Inductor / JAX compilation cache (by "
                        "default kept under $POSENC_CACHE_DIR, else ~/.cache/posenc)")
    tier = p.add_mutually_exclusive_group()
    tier.add_argument("--tier", choices=["standard", "exhaustive"], default="standard",
                      help="standard (default): every backend x dtype x mode x encoding, all "
                           "cases and properties where ports break (eager float64/float32), the "
                           "first cases elsewhere, 5 examples per property; exhaustive: "
                           "everything, 25 examples (hours on 2 cores)")
    tier.add_argument("--exhaustive", dest="tier", action="store_const", const="exhaustive",
                      help="the same as --tier exhaustive")
    p.add_argument("--expectations", metavar="PATH",
                   help="YAML mapping of check pattern -> reason for known gaps (xfail); a "
                        "pattern is a check-id glob, or selects by parameter values: "
                        "'rope[layout=interleaved]'")
    p.add_argument("--skip", action="append", metavar="GLOB",
                   help="deselect checks whose id (backend/device/dtype/mode/encoding/kind:name) "
                        "matches, e.g. 'torch/*/float16/compiled/*', or whose parameters do: "
                        "'rope[layout=interleaved]', '*[scaling.rope_type=yarn]' (repeatable; "
                        "the count is reported)")
    p.add_argument("--compiled-cases", type=params.option("int", minimum=0), metavar="N",
                   help="in compiled mode, check only the first N golden cases of each "
                        "encoding (every property still runs; the count is reported)")
    p.add_argument("--precision", choices=["exact", "conventional", "reduced"], default="exact",
                   help="the precision profile checks must meet: exact (default), conventional "
                        "(float32 angles m·θ) or reduced (angles or cos/sin in bf16/fp16); every "
                        "result is graded with the tightest profile it meets")
    p.add_argument("--include-posenc-code", action="store_true",
                   help="for a backend with overrides, also check the encodings it does not "
                        "provide (posenc's own code, labelled provided_by: posenc)")
    add_settings_argument(p)
    p.add_argument("--json", metavar="PATH", help="write a JSON report")
    p.add_argument("--junit", metavar="PATH", help="write a JUnit XML report")
    p.add_argument("--html", metavar="PATH", help="write a self-contained HTML report page")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.add_argument("--workers", type=COUNT, metavar="N", help="worker processes (default: the number of "
                   "CPU cores, fewer for a small plan; 1 runs in this process); torch and "
                   "TensorFlow never share a worker")
    p.add_argument("--shard", type=shard_option, metavar="K/N",
                   help="run shard K of N only: a deterministic, cost-balanced part of the "
                        "plan; join the shards' --json reports with `posenc report merge`")
    p.add_argument("--check-timeout", type=params.option("float", exclusive_minimum=0),
                   default=1800.0, metavar="SECONDS",
                   help="with workers, a check silent this long is an error (default 1800)")
    p.add_argument("-v", "--verbose", action="store_true", help="print every failure")


def main(args: argparse.Namespace) -> int:
    """Turn the parsed arguments into the run's settings and hand them over: the job runs the
    plan they select, the closing prints and writes what it found. The exit status: 0 green,
    1 failures, 128 + signal stopped."""
    from . import closing, job
    from .settings import from_args

    settings = from_args(args)
    return closing.conclude(settings, job.run(settings))
