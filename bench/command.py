"""``posenc bench``: posenc against the implementations a user would otherwise pick, side by side.

    posenc bench [--suite rope|absolute|bias|all] [--quick] [--threads N] [--json FILE]

Every row of a case runs in the same process on the same inputs (float32, CPU): PyTorch rows
are timed with ``torch.utils.benchmark.Timer.blocked_autorange``, JAX rows with a median loop
over ``block_until_ready``, TensorFlow rows with a median loop that syncs through ``.numpy()``.
keras-hub needs ``KERAS_BACKEND`` before keras is imported, and TensorFlow is best kept out of
a process that has torch, so the TensorFlow and keras rows run in worker subprocesses
(``python -m posenc.bench --worker tf|keras-jax``) that report JSON back. A missing rival gives
a "not installed" row, never a failure. Timings are indicative; nothing here is a test.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from posenc import params

from .engine import run_rows
from .plan import SUITES, plan, suites_of
from .report import echo_report, fill_ratios, report
from .rivals import hide_tensorflow
from .rows import BenchContext
from .sizes import FULL, QUICK
from .workers import KERAS_BACKEND, RUNNERS, workers, write_rows


def run(args: argparse.Namespace, echo: Callable[[str], None] | None = print) -> dict[str, Any]:
    """Times every planned row (TensorFlow and keras rows in workers), prints the table when
    ``echo`` is given, writes ``args.json`` when set, and returns the JSON report."""
    sizes = QUICK if args.quick else FULL
    suites = suites_of(args)
    cases = plan(sizes, suites)
    ctx = BenchContext(sizes, args.threads, args.device)
    say = echo or (lambda _: None)
    say(f"posenc bench: suites {', '.join(suites)}{' (quick)' if args.quick else ''}, "
        f"device {args.device}, threads {args.threads or 'default'}")
    subprocesses = workers(cases)
    timeout = 120.0 if args.quick else 600.0
    if args.quick:  # a smoke test: overlap the workers' start-up with the main rows
        for worker in subprocesses:
            worker.start(args)
    found = run_rows(cases, ctx, "main", echo)
    for worker in subprocesses:
        if not args.quick and worker.planned:  # one at a time: timings on a quiet machine
            say(f"  (worker {worker.runner}: KERAS_BACKEND={KERAS_BACKEND[worker.runner]}, "
                "a subprocess)")
            worker.start(args)
        found += worker.rows(timeout)
    rows = {row.id: row for row in found}
    fill_ratios(cases, rows)
    result = report(cases, rows, sizes, quick=bool(args.quick), suites=suites,
                    device=args.device, threads=args.threads)
    if echo:
        echo_report(cases, rows, result, args.threads, echo)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--suite", action="append", choices=[*SUITES, "all"], default=None,
                        help="rope (rotary + decode), absolute (sinusoidal), bias (T5, ALiBi), gpu "
                             "(rotary kernels on CUDA: needs --device cuda) or all (default; "
                             "gpu included with --device cuda; repeatable)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny shapes and short runs: a smoke test, not a measurement")
    parser.add_argument("--threads", type=params.option("int", minimum=1), metavar="N",
                        help="torch and TensorFlow intra-op threads (default: their default)")
    parser.add_argument("--json", metavar="FILE", help="write the rows and metadata as JSON")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="where the PyTorch rows run (cpu, the default; JAX and TF use their "
                             "default device)")


def _normalise(args: argparse.Namespace) -> argparse.Namespace:
    args.suite = args.suite or ["all"]
    return args


def main_args(args: argparse.Namespace) -> int:
    result = run(_normalise(args))
    errors = [r for r in result["rows"] if r["status"] == "error"]
    return 1 if errors else 0


def _worker(args: argparse.Namespace) -> int:
    sizes = QUICK if args.quick else FULL
    cases = plan(sizes, suites_of(args))
    if args.worker == "keras-jax":
        hide_tensorflow()
    rows = run_rows(cases, BenchContext(sizes, args.threads, args.device), args.worker)
    write_rows(rows, args.worker_out)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m posenc.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    parser.add_argument("--worker", choices=RUNNERS[1:], help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = _normalise(parser.parse_args(argv))
    if args.worker:
        return _worker(args)
    return main_args(args)
