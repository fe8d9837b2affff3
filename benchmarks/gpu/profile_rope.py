"""Where the time of ``torch_triton.rope(q, ids, k=k)`` goes on a GPU, beside the kernel alone.

Llama-3-8B q ``[1, 32, S, 128]`` and k ``[1, 8, S, 128]`` (bf16, S = 32768 unless given). Prints,
for the public call and for the prepared kernel: host time per call (the Python and dispatch
work, measured back to back with no synchronisation), device time per call (CUDA events over a
burst) and the ops each call launches, then the profiler's table of the public call. Writes the
profiler trace (Chrome format, gzipped) to ``$OUT/rope-trace.json.gz``.

    python benchmarks/gpu/profile_rope.py [S]
"""

from __future__ import annotations

import gzip
import os
import shutil
import sys
import time
from pathlib import Path


def _host_and_device_us(fn, calls: int = 200) -> tuple[float, float]:
    import torch

    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    host = (time.perf_counter() - t0) / calls * 1e6  # how fast the host can issue calls
    torch.cuda.synchronize()
    return host, start.elapsed_time(end) * 1e3 / calls


def main(seq: int = 32768) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from posenc.backends import torch_triton as pe

    out = Path(os.environ.get("OUT", "gpu-out"))
    out.mkdir(parents=True, exist_ok=True)
    q = torch.randn(1, 32, seq, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 8, seq, 128, device="cuda", dtype=torch.bfloat16)
    ids = torch.arange(seq, device="cuda")[None]
    op = pe.prepared(q, ids, k=k, base=500000.0)
    qo, ko = torch.empty_like(q), torch.empty_like(k)
    rows = {
        "copy": lambda: (qo.copy_(q), ko.copy_(k)),
        "kernel (prepared)": lambda: op(q, k),
        "public rope": lambda: pe.rope(q, ids, k=k, base=500000.0),
        "public rope inplace": lambda: pe.rope(qo, ids, k=ko, base=500000.0, inplace=True),
    }
    print(f"S={seq}: host us/call (issue rate), device us/call (back to back)")
    for name, fn in rows.items():
        host, device = _host_and_device_us(fn)
        bound = "host-bound" if host > device else "device-bound"
        print(f"  {name:22s} host {host:8.1f}  device {device:8.1f}  ({bound})")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            rows["public rope"]()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    trace = out / "rope-trace.json"
    prof.export_chrome_trace(str(trace))
    with trace.open("rb") as src, gzip.open(f"{trace}.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    trace.unlink()


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
