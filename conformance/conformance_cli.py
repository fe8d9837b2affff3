"""``posenc conformance``: its arguments and its run, from the command line."""

from __future__ import annotations

import argparse
import collections
import os
import sys
from pathlib import Path
from typing import Any

from posenc import params
from posenc.errors import ParameterError

COUNT = params.option("int", minimum=1)  # a count of at least 1 (examples, workers)


def shard_option(text: str) -> str:
    """``--shard K/N``, checked while parsing (a usage error naming the option)."""
    from .shard import parse_shard

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
    """Run the plan the parsed arguments select; print the matrix, failures and findings;
    write the reports asked for. The exit status: 0 green, 1 failures, 128 + signal stopped."""
    # TensorFlow's C++ start-up chatter drowns the report; a caller's own setting wins.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.no_compile_cache:  # read by the backends' sessions, here and in worker processes
        os.environ["POSENC_NO_COMPILE_CACHE"] = "1"
    from . import findings, golden_gate, job
    from .options_loader import build_options
    from .reports import report

    options = build_options(
        backends=args.backend, encodings=args.encoding, dtypes=args.dtype, modes=args.mode,
        device=args.device, tier=args.tier, max_examples=args.max_examples, only=args.only,
        expectations=args.expectations, skip=args.skip, compiled_cases=args.compiled_cases,
        precision=args.precision, include_posenc_code=args.include_posenc_code,
        matmul_precision=args.matmul_precision)
    if not options.backends:
        from posenc.backends import installed_backends

        options.backends = installed_backends()
        print(f"backends: {', '.join(options.backends)} (every installed one)", file=sys.stderr)
    if "jax" in options.backends and (not options.dtypes or "float64" in options.dtypes):
        print("note: JAX 64-bit mode is enabled around the float64 checks only; the others "
              "run under your JAX settings", file=sys.stderr)
    if options.skip or options.compiled_cases is not None:
        import dataclasses

        from .runner import plan

        full = dataclasses.replace(options, skip=[], compiled_cases=None)
        total, kept = len(plan(full)), len(plan(options))
        reasons = [*options.skip]
        if options.compiled_cases is not None:
            reasons.append(f"--compiled-cases {options.compiled_cases}")
        print(f"deselected: {total - kept} of {total} checks ({', '.join(reasons)})",
              file=sys.stderr)
    report_options = {k: v for k, v in vars(args).items() if k != "func"}
    results, stopped = job.run(options, args, report_options)
    print(report.matrix(results))
    for line in report.settings(results):
        print(f"settings: {line}")
    text = report.failures(results, limit=None if args.verbose else 30)
    if text:
        print("\n" + text)
    if golden_text := golden_gate.summary(results):  # each golden problem once
        print("\n" + golden_text)
    if grouped := findings.text(results):
        print("\n" + grouped)
    if args.json and stopped is None:  # a stopped run's partial report is already written
        report.to_json(results, Path(args.json), report_options)
    if args.junit:
        report.to_junit(results, Path(args.junit))
    if args.html:
        report.to_html(results, Path(args.html), {k: v for k, v in vars(args).items()
                                                  if k != "func"})
    failed = sorted({r.check.encoding for r in results if r.failed})
    if failed:
        print(f"\nfailing encodings: {', '.join(failed)}")
    print(report.closing_line(results))
    if stopped is not None:
        return 128 + stopped
    if args.shard and not results:  # more shards than groups: an empty shard is no failure
        return 0
    if all(r.status == "unsupported" for r in results):
        print("nothing was checked: every selected backend/dtype/mode/device is unsupported here"
              f" ({_why_nothing(results)}); `posenc conformance --help` lists the choices",
              file=sys.stderr)
        return 1
    return 1 if failed else 0


def _why_nothing(results: list[Any]) -> str:
    """The commonest reasons the checks were unsupported, with their counts."""
    reasons = collections.Counter(r.message for r in results).most_common(3)
    return "; ".join(f"{reason}: {count} checks" for reason, count in reasons)
