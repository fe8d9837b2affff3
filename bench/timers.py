"""How one call is timed: torch's blocked autorange, a median loop with a JAX or TensorFlow
sync, CUDA events, or a single call."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from .rows import BenchContext, Timing


def time_torch(fn: Callable[[], Any], ctx: BenchContext) -> float:
    import torch
    import torch.utils.benchmark as benchmark

    with torch.no_grad():
        fn()  # warm-up (caches, allocator)
        timer = benchmark.Timer(stmt="fn()", globals={"fn": fn},
                                num_threads=ctx.threads or torch.get_num_threads())
        return timer.blocked_autorange(min_run_time=ctx.sizes.min_run_time).median


def time_loop(fn: Callable[[], Any], sync: Callable[[Any], Any], ctx: BenchContext,
              min_runs: int = 5) -> float:
    sync(fn())  # compile + warm-up
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_runs or time.perf_counter() - start < ctx.sizes.min_run_time:
        t0 = time.perf_counter()
        sync(fn())
        times.append(time.perf_counter() - t0)
        if len(times) >= 3 and time.perf_counter() - start > 10 * ctx.sizes.min_run_time:
            break  # slow calls: three runs are enough
    return statistics.median(times)


def jax_sync(out: Any) -> Any:
    import jax

    return jax.block_until_ready(out)


def tf_sync(out: Any) -> Any:
    first = out[0] if isinstance(out, tuple | list) else out
    return first[(0,) * len(first.shape)].numpy()  # one element: waits for the call, copies nothing


def time_cuda(fn: Any) -> float:
    """Median seconds of ``fn`` on the current CUDA stream (CUDA events)."""
    try:
        from triton.testing import do_bench
    except ImportError:
        do_bench = None
    if do_bench is not None:
        return float(do_bench(fn, warmup=50, rep=300, return_mode="median")) * 1e-3
    import torch

    for _ in range(10):
        fn()
    times = []
    for _ in range(100):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return statistics.median(times)


def measure(timing: Timing, ctx: BenchContext) -> float:
    """Median seconds of ``timing.fn``, timed the way its kind asks."""
    if timing.kind == "torch":
        return time_torch(timing.fn, ctx)
    if timing.kind == "jax":
        return time_loop(timing.fn, jax_sync, ctx)
    if timing.kind == "tf":
        return time_loop(timing.fn, tf_sync, ctx)
    if timing.kind == "cuda":
        return time_cuda(timing.fn)
    if timing.kind == "once":  # a slow one-off (a model's init): one timed call
        t0 = time.perf_counter()
        timing.fn()
        return time.perf_counter() - t0
    raise ValueError(timing.kind)
