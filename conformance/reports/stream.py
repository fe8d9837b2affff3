"""The JSON report written while a run goes on, so that a stopped run (Ctrl-C, SIGTERM, a CI
timeout) leaves every finished result.

The file is the ordinary ``--json`` report (``posenc report merge`` reads it) plus ``complete``,
``planned`` and ``interrupted``. It is rewritten atomically (a temporary file, then a rename)
at most every few seconds, less often when the rewrite itself is slow.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from ..runner import Result
from . import report


class ReportStream:
    def __init__(self, path: Path, options: dict[str, Any], planned: int,
                 interval: float = 5.0) -> None:
        self.path, self.options, self.planned = Path(path), options, planned
        self.interval = interval
        self.results: dict[int, Result] = {}
        self._last = time.monotonic()
        self._cost = 0.0  # seconds the last rewrite took

    def add(self, index: int, result: Result) -> None:
        self.results[index] = result
        if time.monotonic() - self._last >= max(self.interval, 20 * self._cost):
            self.write()

    def write(self, interrupted: str | None = None) -> None:
        start = time.monotonic()
        ordered = [self.results[i] for i in sorted(self.results)]
        data = report.document(ordered, self.options)
        data.update(complete=len(ordered) == self.planned and interrupted is None,
                    planned=self.planned, interrupted=interrupted)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)
        self._last = time.monotonic()
        self._cost = self._last - start
