"""Running a conformance plan in worker processes (``posenc conformance --workers N``).

Each worker is a fresh ``spawn`` process that holds one framework family (TensorFlow and torch
never share a process) and runs whole groups (one backend/device/dtype/mode/encoding, so the
group's compiled functions are reused). Results come back over a pipe as they finish. A worker
that dies (a segfault, ``os._exit``) or goes silent for ``check_timeout`` seconds is replaced;
the check it was running and the rest of its group are reported as ``error`` with the cause.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import pickle
import signal
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from posenc.backends import get_backend, installed_backends
from posenc.errors import ParameterError

from . import shard
from .runner import Check, Options, Result

Sink = Callable[[int, Result], None]
DEFAULT_CHECK_TIMEOUT = 1800.0  # a compiled property of 25 examples can take minutes
STARTUP = 300.0  # seconds a new worker may take to start (spawn, imports) on a loaded machine


def parse_workers(value: int | str) -> int:
    """A worker count of at least 1; anything else is a ParameterError naming the value."""
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ParameterError(f"--workers {value!r}: expected a whole number of processes, "
                             "at least 1") from None
    if n < 1:
        raise ParameterError(f"--workers {value!r}: at least 1 worker is needed (1 runs the "
                             "checks in this process)")
    return n


def supported(options: Options) -> bool:
    """Whether the backends can be named in another process (Backend objects cannot)."""
    return all(isinstance(b, str) for b in options.backends)


def execute(options: Options, checks: Sequence[Check], workers: int, sink: Sink,
            tick: Callable[[], None] | None = None,
            check_timeout: float = DEFAULT_CHECK_TIMEOUT) -> None:
    """Run ``checks`` in up to ``workers`` processes, calling ``sink(index, result)`` in this
    process for every check as it finishes (in completion order). ``tick`` is called about
    once a second. On KeyboardInterrupt every worker is stopped and the interrupt propagates."""
    pool = _Pool(options, checks, workers, sink, check_timeout)
    try:
        while pool.busy():
            pool.dispatch()
            pool.wait(timeout=1.0)
            if tick is not None:
                tick()
    finally:
        pool.shutdown()


@dataclass
class _Worker:
    family: str
    process: Any
    conn: Connection
    todo: list[int] = field(default_factory=list)  # unfinished checks of the current group
    last_heard: float = field(default_factory=time.monotonic)
    ready: bool = False  # started: imported its frameworks and built its runner
    dead: bool = False


class _Pool:
    def __init__(self, options: Options, checks: Sequence[Check], workers: int, sink: Sink,
                 check_timeout: float) -> None:
        self.checks, self.sink, self.check_timeout = checks, sink, check_timeout
        self.size = workers
        # the cores shared out: N workers each running a framework's own thread pool over
        # every core would fight over them (measured: slower than one worker)
        self.threads = max(1, cores() // workers)
        self.context = multiprocessing.get_context("spawn")
        # the backend names as the user gave them, per family: the worker resolves them again
        self.named: dict[str, list[str]] = {}
        for given in options.backends or installed_backends():
            name = get_backend(given).name
            self.named.setdefault(shard.family(name), []).append(given)
        self.options = options
        groups = shard.groups(checks)
        cost = {g[0]: sum(shard.check_cost(checks[i], options.max_examples) for i in g)
                for g in groups}
        self.queues: dict[str, deque[list[int]]] = {}
        for g in sorted(groups, key=lambda g: (-cost[g[0]], g[0])):  # largest groups first
            self.queues.setdefault(shard.family(checks[g[0]].backend), deque()).append(g)
        self.remaining = {f: sum(cost[g[0]] for g in q) for f, q in self.queues.items()}
        self.cost = cost
        self.workers: list[_Worker] = []
        self.retired: list[_Worker] = []

    def busy(self) -> bool:
        return any(self.queues.values()) or any(w.todo for w in self.workers)

    def dispatch(self) -> None:
        for worker in [w for w in self.workers if not w.todo]:
            queue = self.queues.get(worker.family)
            if queue:
                self._send(worker, queue.popleft())
            else:  # nothing left for its framework: free the slot for another one
                self._stop(worker)
        self._retire()
        while len(self.workers) < self.size and any(self.queues.values()):
            fam = max((f for f, q in self.queues.items() if q), key=lambda f: self.remaining[f])
            worker = self._start(fam)
            self._send(worker, self.queues[fam].popleft())

    def wait(self, timeout: float) -> None:
        live = [w for w in self.workers if w.todo]
        if not live:
            return
        ready = wait([w.conn for w in live] + [w.process.sentinel for w in live], timeout)
        for worker in live:
            if worker.conn in ready or worker.process.sentinel in ready:
                self._receive(worker)
            if worker.todo and worker.dead:
                self._crashed(worker, _death(worker.process))
            elif worker.todo and time.monotonic() - worker.last_heard > (
                    self.check_timeout if worker.ready else max(self.check_timeout, STARTUP)):
                worker.process.kill()
                worker.process.join(5)
                self._crashed(worker, f"timed out: no result for {self.check_timeout:.0f} s")
        self._retire()

    def _retire(self) -> None:
        self.retired += [w for w in self.workers if w.dead]
        self.workers = [w for w in self.workers if not w.dead]

    def shutdown(self) -> None:
        for worker in self.workers:
            if worker.todo:  # interrupted mid-group: its results are no longer wanted
                worker.process.kill()
            self._stop(worker)
        self._retire()
        for worker in self.retired:
            worker.process.join(2)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(2)

    # -- one worker ------------------------------------------------------------------------
    def _start(self, fam: str) -> _Worker:
        ours, theirs = self.context.Pipe()
        options = dataclasses.replace(self.options, backends=self.named[fam])
        process = self.context.Process(target=_work, args=(theirs, options, self.threads),
                                       daemon=True,
                                       name=f"posenc-{fam}")
        process.start()
        theirs.close()
        worker = _Worker(fam, process, ours)
        self.workers.append(worker)
        return worker

    def _send(self, worker: _Worker, group: list[int]) -> None:
        self.remaining[worker.family] -= self.cost[group[0]]
        worker.todo = list(group)
        worker.last_heard = time.monotonic()
        try:
            worker.conn.send([(i, self.checks[i]) for i in group])
        except (OSError, EOFError):
            worker.dead = True

    def _stop(self, worker: _Worker) -> None:
        if not worker.dead:
            try:
                worker.conn.send(None)
            except (OSError, EOFError):
                pass
            worker.dead = True

    def _receive(self, worker: _Worker) -> None:
        try:
            while worker.conn.poll():
                message = worker.conn.recv()
                worker.last_heard = time.monotonic()
                if message[0] == "ready":
                    worker.ready = True
                elif message[0] == "result":
                    _, index, result = message
                    worker.todo.remove(index)
                    self.sink(index, result)
                elif message[0] == "fatal":  # the worker could not start its runner
                    for index in worker.todo:
                        self.sink(index, Result(self.checks[index], "error", message[1]))
                    worker.todo = []
                    worker.dead = True
        except (EOFError, OSError):
            worker.dead = True
        if not worker.process.is_alive():
            worker.dead = True

    def _crashed(self, worker: _Worker, cause: str) -> None:
        first, *rest = worker.todo
        self.sink(first, Result(self.checks[first], "error",
                                f"worker process ({worker.family}) {cause} while running this "
                                "check"))
        for index in rest:
            self.sink(index, Result(self.checks[index], "error",
                                    f"not run: the worker process ({worker.family}) {cause} "
                                    f"while running {self.checks[first].id}"))
        worker.todo = []
        worker.dead = True


def _death(process: Any) -> str:
    process.join(5)
    code = process.exitcode
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            return f"died of signal {signal.Signals(-code).name}"
        except ValueError:
            return f"died of signal {-code}"
    return f"exited with code {code}"


def cores() -> int:
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:
        return os.cpu_count() or 1


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")


# JAX and TensorFlow take most of a GPU's memory at start-up; workers share the GPU
SHARED_GPU = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}


def _work(conn: Connection, options: Options, threads: int) -> None:
    """A worker process: run the groups it is sent until it is sent None."""
    # Ctrl-C and a CI's SIGTERM reach the whole process group: the parent decides when to
    # stop, so that a stopped run does not report its workers' deaths as errors
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for name in THREAD_VARIABLES:  # before any framework is imported; the user's setting wins
        os.environ.setdefault(name, str(threads))
    for name, value in SHARED_GPU.items():
        os.environ.setdefault(name, value)
    from .runner import Runner

    runner = None
    try:
        while (group := conn.recv()) is not None:
            if runner is None:
                try:
                    runner = Runner(options)
                except Exception as exc:
                    conn.send(("fatal", f"worker could not start: {type(exc).__name__}: {exc}"))
                    return
                conn.send(("ready",))
            for index, check in group:
                conn.send(("result", index, _picklable(runner.execute(check))))
    except (EOFError, OSError, KeyboardInterrupt):
        pass  # the parent went away or stopped the run
    finally:
        if runner is not None:
            runner.close()


def _picklable(result: Result) -> Result:
    try:
        pickle.dumps(result)
    except Exception:
        result.details = {k: repr(v) for k, v in result.details.items()}
    return result
