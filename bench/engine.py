"""Runs the planned rows of one process (the main one or a worker): thread settings, one row at
a time, and a row for every failure instead of a crash."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from .rows import BenchCase, BenchContext, Missing, PlannedRow, Row
from .timers import measure


def run_planned(planned: PlannedRow, case: BenchCase, ctx: BenchContext) -> Row:
    row = Row(id=planned.id, case=case.key, label=planned.label, runner=planned.runner,
              vs=planned.vs)
    try:
        timing = planned.build(ctx)
        row.note = timing.note
        row.median_s = measure(timing, ctx)
        if timing.bytes:
            row.bandwidth_gbs = timing.bytes / row.median_s / 1e9
    except Missing as exc:
        row.status, row.detail = "not installed", str(exc)
    except ImportError as exc:
        row.status = "not installed"
        row.detail = f"{exc.name or exc} is not installed"
    except Exception as exc:  # a benchmark reports, it does not crash
        row.status, row.detail = "error", f"{type(exc).__name__}: {exc}"[:300]
    return row


@contextlib.contextmanager
def threads(count: int | None, runner: str) -> Iterator[None]:
    """torch's (main process) or TensorFlow's (tf worker) intra-op threads set to ``count``."""
    restore: Callable[[], None] = lambda: None  # noqa: E731
    if count and runner == "main":
        with contextlib.suppress(ImportError):
            import torch

            before = torch.get_num_threads()
            torch.set_num_threads(count)
            restore = lambda: torch.set_num_threads(before)  # noqa: E731
    elif count and runner == "tf":  # a fresh worker: before TensorFlow starts its pools
        with contextlib.suppress(ImportError):
            import tensorflow as tf

            tf.config.threading.set_intra_op_parallelism_threads(count)
    try:
        yield
    finally:
        restore()


def run_rows(cases: list[BenchCase], ctx: BenchContext, runner: str,
             echo: Callable[[str], None] | None = None) -> list[Row]:
    """Every planned row of ``cases`` that ``runner`` times, in order."""
    rows = []
    with threads(ctx.threads, runner):
        for case in cases:
            for planned in case.planned:
                if planned.runner == runner:
                    row = run_planned(planned, case, ctx)
                    rows.append(row)
                    if echo:
                        echo(f"  {row.id}: " + (f"{row.median_s * 1e3:.3f} ms" if row.median_s
                                                 else f"{row.status} {row.detail}"))
    return rows
