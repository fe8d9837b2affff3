"""A conformance run as ``posenc conformance`` does it, from its frozen settings: plan once,
take a shard, print the plan, execute in this process or in workers, show progress, stream
the JSON, and stop cleanly on Ctrl-C or SIGTERM with every finished result kept."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .. import parallel, shard
from ..reports.progress import Heartbeat, Progress, describe_plan
from ..reports.stream import ReportStream
from ..runner import Options, Result, Runner
from .settings import Settings


def default_workers() -> int:
    return parallel.cores()


# estimated seconds of checks that pay for starting one more worker process (spawn, imports)
WORTH_A_WORKER = 20.0


class Stopped(BaseException):  # not Exception: a check must not catch it
    """A signal asked the run to stop."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass(frozen=True)
class Outcome:
    results: list[Result]  # in plan order
    stopped: int | None  # the signal that stopped the run (None: it ran to the end)
    report_options: dict[str, Any]  # the options as typed, the plan's backends and the shard


def run(settings: Settings) -> Outcome:
    """Plan once, take the shard, execute in this process or in workers. With ``--json`` the
    report is rewritten as results come in."""
    # TensorFlow's C++ start-up chatter drowns the report; a caller's own setting wins.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if not settings.compile_cache:  # read by the backends' sessions, here and in workers
        os.environ["POSENC_NO_COMPILE_CACHE"] = "1"
    options = settings.options
    _announce(settings)
    with Runner(options) as runner:  # planning only
        checks = runner.plan()
        deselected = runner.deselected
    if options.skip or options.compiled_cases is not None:
        reasons = [*options.skip]
        if options.compiled_cases is not None:
            reasons.append(f"--compiled-cases {options.compiled_cases}")
        print(f"deselected: {deselected} of {len(checks) + deselected} checks "
              f"({', '.join(reasons)})", file=sys.stderr)
    # the whole plan's backend order, so that merged shards show the columns in that order
    report_options = {**settings.given,
                      "plan_backends": list(dict.fromkeys(c.backend for c in checks))}
    if settings.shard is not None:
        checks, report_options["shard"] = _take_shard(checks, settings)
    workers = _workers(checks, settings)
    if not settings.quiet:
        print(describe_plan(checks, workers, options.max_examples), file=sys.stderr)
    results, stopped = _execute(checks, workers, settings, report_options)
    return Outcome(results, stopped, report_options)


def _announce(settings: Settings) -> None:
    options = settings.options
    if settings.every_installed_backend:
        print(f"backends: {', '.join(map(str, options.backends))} (every installed one)",
              file=sys.stderr)
    if "jax" in options.backends and (not options.dtypes or "float64" in options.dtypes):
        print("note: JAX 64-bit mode is enabled around the float64 checks only; the others "
              "run under your JAX settings", file=sys.stderr)


def _take_shard(checks: list[Any], settings: Settings) -> tuple[list[Any], dict[str, int]]:
    index, of = settings.shard  # type: ignore[misc]
    part = shard.select(checks, index, of, max_examples=settings.options.max_examples)
    print(f"shard {index}/{of}: {len(part)} of {len(checks)} checks", file=sys.stderr)
    if not part:
        print(f"shard {index}/{of} is empty: the plan has only {len(shard.groups(checks))} "
              "group(s) (backend/device/dtype/mode/encoding), the unit a shard takes whole",
              file=sys.stderr)
    return part, {"index": index, "of": of, "plan_checks": len(checks)}


def _workers(checks: list[Any], settings: Settings) -> int:
    options = settings.options
    workers = settings.workers
    if workers is None:  # by default, as many as pay for their start-up
        cost = sum(shard.check_cost(c, options.max_examples) for c in checks)
        workers = max(1, min(default_workers(), int(cost / WORTH_A_WORKER)))
    if workers > 1 and not parallel.supported(options):
        print("note: a backend given as an object cannot go to a worker process; running in "
              "this process", file=sys.stderr)
        workers = 1
    return min(workers, max(len(shard.groups(checks)), 1))


def _execute(checks: list[Any], workers: int, settings: Settings,
             report_options: dict[str, Any]) -> tuple[list[Result], int | None]:
    options = settings.options
    progress = None if settings.quiet else Progress(checks, max_examples=options.max_examples)
    stream = (ReportStream(settings.json, report_options, len(checks))
              if settings.json else None)
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
                                 check_timeout=settings.check_timeout)
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
