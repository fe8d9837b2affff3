"""The worker subprocesses: the TensorFlow and keras rows run in ``python -m posenc.bench
--worker tf|keras-jax --worker-out FILE ...`` (keras reads ``KERAS_BACKEND`` at its import, and
TensorFlow is best kept out of a process that holds torch), which writes its rows as JSON."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .rows import BenchCase, PlannedRow, Row

RUNNERS = ("main", "tf", "keras-jax")
KERAS_BACKEND = {"tf": "tensorflow", "keras-jax": "jax"}


@dataclass
class Worker:
    runner: str
    planned: list[tuple[BenchCase, PlannedRow]]
    proc: subprocess.Popen[str] | None = None
    tmp: tempfile.TemporaryDirectory[str] | None = None

    def start(self, args: argparse.Namespace) -> Worker:
        if not self.planned:
            return self
        env = {**os.environ, "KERAS_BACKEND": KERAS_BACKEND[self.runner]}
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        self.tmp = tempfile.TemporaryDirectory()
        cmd = [sys.executable, "-m", "posenc.bench", "--worker", self.runner, "--worker-out",
               str(Path(self.tmp.name) / "rows.json"), "--device", args.device]
        for suite in args.suite:
            cmd += ["--suite", suite]
        if args.quick:
            cmd.append("--quick")
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        return self

    def rows(self, timeout: float) -> list[Row]:
        if self.proc is None or self.tmp is None:
            return []
        try:
            _, stderr = self.proc.communicate(timeout=timeout)
            out = Path(self.tmp.name) / "rows.json"
            if self.proc.returncode == 0 and out.exists():
                return [Row(**r) for r in json.loads(out.read_text())]
            why = f"worker {self.runner} exited {self.proc.returncode}: {stderr.strip()[-300:]}"
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            why = f"worker {self.runner} timed out after {timeout:.0f} s"
        finally:
            self.tmp.cleanup()
        return [Row(id=planned.id, case=case.key, label=planned.label, runner=self.runner,
                    vs=planned.vs, status="error", detail=why) for case, planned in self.planned]


def workers(cases: list[BenchCase]) -> list[Worker]:
    """One worker per subprocess runner, holding the planned rows it times (maybe none)."""
    return [Worker(runner, [(c, p) for c in cases for p in c.planned if p.runner == runner])
            for runner in RUNNERS[1:]]


def write_rows(rows: list[Row], path: str) -> None:
    """A worker's answer: its rows as JSON, read back by :meth:`Worker.rows`."""
    Path(path).write_text(json.dumps([dataclasses.asdict(r) for r in rows]))
