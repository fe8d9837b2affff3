"""Honest progress for long conformance runs: the plan up front, then done/total, failures so
far and an ETA, redrawn on a terminal and printed at least every ``interval`` seconds elsewhere
(CI logs), even while one slow check (a fresh compilation) runs."""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import TextIO

from ..runner import Check, Result
from ..shard import check_cost


def describe_plan(checks: Sequence[Check], workers: int, max_examples: int = 25) -> str:
    """Checks per backend and mode, and a rough estimate of the wall time."""
    per: Counter[tuple[str, str]] = Counter((c.backend, c.mode) for c in checks)
    backends = list(dict.fromkeys(c.backend for c in checks))
    parts = []
    for b in backends:
        modes = ", ".join(f"{m} {per[(b, m)]}" for m in ("eager", "compiled") if per[(b, m)])
        parts.append(f"{b} {sum(n for (k, _), n in per.items() if k == b)} ({modes})")
    seconds = sum(check_cost(c, max_examples) for c in checks) / max(workers, 1)
    return (f"plan: {len(checks)} checks: {'; '.join(parts) or 'none'}\n"
            f"estimate: about {_duration(seconds)} with {workers} worker(s) (a rough guess from "
            "typical check times on a 2-core CPU; the ETA below follows the measured rate)")


class Progress:
    """Counts finished checks; call :meth:`tick` often (it prints only when due)."""

    def __init__(self, checks: Sequence[Check], stream: TextIO = sys.stderr,
                 interval: float = 30.0, max_examples: int = 25, width: int = 24) -> None:
        self.stream, self.interval, self.width = stream, interval, width
        self.tty = stream.isatty()
        self.total = len(checks)
        self.max_examples = max_examples
        self.total_cost = sum(check_cost(c, max_examples) for c in checks) or 1.0
        self.done = self.failed = 0
        self.done_cost = 0.0
        self.start = self._last_line = time.monotonic()
        self._last_decile = 0
        self.running: Check | None = None  # the check under way (serial runs only)
        self._lock = threading.Lock()

    def started(self, check: Check) -> None:
        self.running = check

    def finished(self, result: Result) -> None:
        with self._lock:
            self.done += 1
            self.failed += result.failed
            self.done_cost += check_cost(result.check, self.max_examples)
            self.running = None
            decile = self.done * 10 // max(self.total, 1)
            due = self.tty or decile != self._last_decile
            self._last_decile = decile
        if due:
            self._print(result.check.id)

    def tick(self) -> None:
        """Print a line when ``interval`` seconds have passed since the last one."""
        if time.monotonic() - self._last_line >= (1.0 if self.tty else self.interval):
            running = self.running
            self._print(f"running {running.id}" if running is not None else "")

    def close(self, note: str = "") -> None:
        """End the bar; a note (why the run stopped) is always printed."""
        if note or self.tty:
            self._print(note or "done", final=True)

    def line(self, label: str = "") -> str:
        elapsed = time.monotonic() - self.start
        frac = self.done / self.total if self.total else 1.0
        filled = int(frac * self.width)
        bar = "#" * filled + "." * (self.width - filled)
        text = (f"[{bar}] {self.done}/{self.total} {frac:4.0%} {_duration(elapsed)}, "
                f"{self.failed} failed, ETA {self.eta(elapsed)}")
        return f"{text} {label}".rstrip()

    def eta(self, elapsed: float) -> str:
        left = max(self.total_cost - self.done_cost, 0.0)
        if self.done == self.total:
            return "0s"
        if self.done_cost <= 0 or elapsed < 5:
            return "?"
        return _duration(left * elapsed / self.done_cost)

    def _print(self, label: str, final: bool = False) -> None:
        with self._lock:
            self._last_line = time.monotonic()
            text = self.line(label)
            if self.tty:
                self.stream.write("\r" + text[:150].ljust(150) + ("\n" if final else ""))
            else:
                self.stream.write(text + "\n")
            self.stream.flush()


class Heartbeat:
    """Calls ``progress.tick`` every second from a thread while a serial run is busy."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True, name="posenc-progress")

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2)

    def _beat(self) -> None:
        while not self._stop.wait(1.0):
            self.progress.tick()


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m"
