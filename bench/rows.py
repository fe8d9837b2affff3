"""What the bench plans and what it reports: a planned row and its case, the timing a row's
builder returns, a measured row, and the context (sizes, threads, device, input cache) of a run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .sizes import Sizes


class Missing(Exception):
    """A rival (or a piece of posenc) that is not installed: the row says so."""


@dataclass
class BenchContext:
    """Run settings plus a per-run cache of inputs shared by the rows of a case."""
    sizes: Sizes
    threads: int | None
    device: str
    cache: dict[Any, Any] = field(default_factory=dict)

    def memo(self, key: Any, make: Callable[[], Any]) -> Any:
        if key not in self.cache:
            self.cache[key] = make()
        return self.cache[key]


@dataclass
class Timing:
    """What a row's builder returns: the call to time and how to time it."""
    fn: Callable[[], Any]
    kind: str  # "torch" | "jax" | "tf" | "once" | "cuda"
    note: str = ""
    bytes: int = 0  # bytes the operation must read and write (0: no bandwidth column)


@dataclass
class PlannedRow:
    """One row of a case before it runs: its id, its label, the process that times it, and the
    builder that makes its inputs and returns the call to time."""
    id: str
    label: str
    runner: str  # "main" | "tf" | "keras-jax" (a worker subprocess)
    build: Callable[[BenchContext], Timing]
    vs: str | None = None  # id of the row this one's ratio divides by (None: the case's first)


@dataclass
class BenchCase:
    """Rows timed on the same inputs and compared with one another: one block of the table."""
    key: str
    suite: str
    title: str
    planned: list[PlannedRow]


@dataclass
class Row:
    """A measured row, as the table prints it and the JSON report stores it."""
    id: str
    case: str
    label: str
    runner: str
    vs: str | None
    status: str = "ok"  # ok | not installed | error | skipped
    median_s: float | None = None
    ratio: float | None = None
    detail: str = ""
    note: str = ""
    bandwidth_gbs: float | None = None  # bytes read and written / time, where counted
    of_copy: float | None = None  # fraction of the case's device-copy bandwidth
