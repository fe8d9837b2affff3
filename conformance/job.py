"""A conformance run as ``posenc conformance`` does it: plan, take a shard, print the plan,
execute in this process or in workers, show progress, stream the JSON, and stop cleanly on
Ctrl-C or SIGTERM with every finished result kept."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import parallel, shard
from .reports.progress import Heartbeat, Progress, describe_plan
from .reports.stream import ReportStream
from .runner import Options, Result, Runner


def default_workers() -> int:
    return parallel.cores()


# estimated seconds of checks that pay for starting one more worker process (spawn, imports)
WORTH_A_WORKER = 20.0


class Stopped(BaseException):  # not Exception: a check must not catch it
    """A signal asked the run to stop."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def run(options: Options, args: argparse.Namespace, report_options: dict[str, Any]
        ) -> tuple[list[Result], int | None]:
    """The results in plan order, and the signal number that stopped the run (None: it ran to
    the end). With ``--json`` the report is rewritten as results come in."""
    workers = parallel.parse_workers(args.workers if args.workers is not None else 1)
    part = shard.parse_shard(args.shard) if args.shard else None
    with Runner(options) as runner:  # planning only
        checks = runner.plan()
    # the whole plan's backend order, so that merged shards show the columns in that order
    report_options["plan_backends"] = list(dict.fromkeys(c.backend for c in checks))
    if part is not None:
        whole_plan, whole = checks, len(checks)
        checks = shard.select(checks, *part, max_examples=options.max_examples)
        report_options["shard"] = {"index": part[0], "of": part[1], "plan_checks": whole}
        print(f"shard {part[0]}/{part[1]}: {len(checks)} of {whole} checks", file=sys.stderr)
        if not checks:
            print(f"shard {part[0]}/{part[1]} is empty: the plan has only "
                  f"{len(shard.groups(whole_plan))} group(s) (backend/device/dtype/mode/"
                  "encoding), the unit a shard takes whole", file=sys.stderr)
    if args.workers is None:  # by default, as many as pay for their start-up
        cost = sum(shard.check_cost(c, options.max_examples) for c in checks)
        workers = max(1, min(default_workers(), int(cost / WORTH_A_WORKER)))
    if workers > 1 and not parallel.supported(options):
        print("note: a backend given as an object cannot go to a worker process; running in "
              "this process", file=sys.stderr)
        workers = 1
    workers = min(workers, max(len(shard.groups(checks)), 1))
    if not args.quiet:
        print(describe_plan(checks, workers, options.max_examples), file=sys.stderr)

    progress = None if args.quiet else Progress(checks, max_examples=options.max_examples)
    stream = ReportStream(Path(args.json), report_options, len(checks)) if args.json else None
    done: dict[int, Result] = {}

    def sink(index: int, result: Result) -> None:
        done[index] = result
        if progress is not None:
            progress.finished(result)
        if stream is not None:
            stream.add(index, result)

    stopped: int | None = None
    try:
        with _signals_stop():
            if workers == 1:
                _serial(options, checks, sink, progress)
            else:
                parallel.execute(options, checks, workers, sink,
                                 tick=progress.tick if progress is not None else None,
                                 check_timeout=args.check_timeout)
    except KeyboardInterrupt:
        stopped = signal.SIGINT
    except Stopped as exc:
        stopped = exc.signum
    results = [done[i] for i in sorted(done)]
    if stopped is not None:
        what = (f"interrupted by {signal.Signals(stopped).name} after {len(results)} of "
                f"{len(checks)} checks")
        if progress is not None:
            progress.close(what)
        print(f"{what}; the report below covers the finished checks only", file=sys.stderr)
        if stream is not None:
            stream.write(interrupted=what)
    elif progress is not None:
        progress.close()
    return results, stopped


def _serial(options: Options, checks: list[Any], sink: Any, progress: Progress | None) -> None:
    with Runner(options) as runner, Heartbeat(progress) if progress else contextlib.nullcontext():
        for index, check in enumerate(checks):
            if progress is not None:
                progress.started(check)
            sink(index, runner.execute(check))


@contextlib.contextmanager
def _signals_stop() -> Iterator[None]:
    """SIGTERM (a CI timeout, ``kill``) stops the run like Ctrl-C does."""

    def stop(signum: int, frame: object) -> None:
        raise Stopped(signum)

    try:
        previous = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
