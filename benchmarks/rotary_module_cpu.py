"""`pe.RotaryEmbedding` on CPU against llama.cpp's ggml, transformers and a copy, in one run.

    python benchmarks/rotary_module_cpu.py                     # the issue-43 table (markdown)
    python benchmarks/rotary_module_cpu.py --seq 4096 --dtype float32 --threads 2
    python benchmarks/rotary_module_cpu.py --ggml-python /work/envs/ggml/bin/python

Prefill of Llama-3-8B's q ``[1, 32, S, 128]`` and k ``[1, 8, S, 128]`` (theta 500000, GQA):
every row rotates q and k. ``copy`` is q and k copied into preallocated tensors: the limit, and
the unit of the ``of copy`` column (copy time / row time; 1.00 is a copy's speed). ``vs ggml``
is row time / ggml's time (< 1 is faster). ggml runs in a subprocess of the Python that has
ggml-python (``--ggml-python``, or ``$POSENC_GGML_PYTHON``, default /work/envs/ggml/bin/python),
in place, float16 for the bfloat16 rows (ggml-cpu's rope has no bfloat16). Decode rows are one
token (q ``[1, 32, 1, 128]``, k ``[1, 8, 1, 128]``) at position 4096, vs transformers.
Each row is the least of its medians (``torch.utils.benchmark.Timer.blocked_autorange``; ggml:
its worker's median of 20 runs; ``--stat least`` or ``cpu`` for a shared machine) over
``--rounds`` interleaved rounds, and the last column the
spread of its ratio to ggml within each round; nothing is asserted. Two rows copy q and k into
new tensors (plain, and advised huge pages as the allocating path's results are): what any
call returning new tensors pays in page faults. The last row of a case is the time of the first
three posenc calls, which compile the Inductor kernels (or read them from Inductor's cache).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.utils.benchmark as benchmark

from posenc.backends import torch as pe
from posenc.backends.torch.memory import empty_for_writing

BASE = 500000.0
HEADS = (32, 8)
DIM = 128


def _time(fn: Any, threads: int, seconds: float) -> float:
    with torch.no_grad():
        fn()
        if STAT == "cpu":
            return _cpu_time(fn, seconds)
        timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
        measured = timer.blocked_autorange(min_run_time=seconds)
        return min(measured.times) if STAT == "least" else measured.median


def _cpu_time(fn: Any, seconds: float) -> float:
    """The mean CPU time of a call over ``seconds`` of calls (every thread of this process,
    user and system; the clock ticks too coarsely to time one call): time another process
    takes from this one is not counted, a thread spinning at a barrier is."""
    calls, end, start = 0, time.perf_counter() + seconds, time.process_time()
    while calls < 5 or time.perf_counter() < end:
        fn()
        calls += 1
    return (time.process_time() - start) / calls


STAT = "median"  # --stat: median (wall), least (wall: a block's least), cpu (mean CPU time)


def _transformers(seq: int) -> Any:
    try:
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import (
            LlamaRotaryEmbedding,
            apply_rotary_pos_emb,
        )
    except ImportError:
        return None
    config = LlamaConfig(hidden_size=HEADS[0] * DIM, num_attention_heads=HEADS[0],
                         num_key_value_heads=HEADS[1], head_dim=DIM,
                         rope_parameters={"rope_type": "default", "rope_theta": BASE})
    rotary = LlamaRotaryEmbedding(config)

    def run(q: torch.Tensor, k: torch.Tensor, ids: torch.Tensor) -> Any:
        cos, sin = rotary(q, ids)
        return apply_rotary_pos_emb(q, k, cos, sin)

    return run


def _ggml(python: str, seq: int, dtype: str, threads: int) -> dict[str, float] | None:
    if not Path(python).exists():
        return None
    worker = Path(__file__).with_name("ggml_rope_worker.py")
    cmd = [python, str(worker), "--seq", str(seq), "--threads", str(threads),
           "--dtype", "f32" if dtype == "float32" else "f16"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(f"ggml worker failed: {done.stderr.strip()[-300:]}", file=sys.stderr)
        return None
    return json.loads(done.stdout)


def prefill_rows(seq: int, dtype: str, threads: int, seconds: float, ggml_python: str,
                 rounds: int) -> list[tuple[str, list[float] | None]]:
    dt = getattr(torch, dtype)
    q, k = (torch.randn(1, h, seq, DIM).to(dt) for h in HEADS)
    qo, ko = torch.empty_like(q), torch.empty_like(k)
    qi, ki = q.clone(), k.clone()
    ids = torch.arange(seq)
    rot = pe.RotaryEmbedding(DIM, base=BASE, max_positions=seq)
    hf = _transformers(seq)
    tag = "f32" if dtype == "float32" else "f16"
    rows = {
        "copy of q and k (preallocated)": lambda: (qo.copy_(q), ko.copy_(k)),
        f"ggml_rope_ext, in place ({tag})": "rope",
        "ggml's own copy (ggml_cpy)": "copy",
        "transformers Llama rotary": None if hf is None else lambda: hf(q, k, ids[None]),
        "posenc RotaryEmbedding, in place": lambda: rot(qi, ids, k=ki, inplace=True),
        "posenc RotaryEmbedding, out=": lambda: rot(q, ids, k=k, out=(qo, ko)),
        "posenc RotaryEmbedding, allocating": lambda: rot(q, ids, k=k),
        # what any call returning new q and k pays before rotating: page faults of fresh memory
        "copy into new tensors (torch.empty)": lambda: (
            torch.empty_like(q).copy_(q), torch.empty_like(k).copy_(k)),
        "copy into new tensors, huge-page advised": lambda: (
            empty_for_writing(q.shape, q.dtype, q.device).copy_(q),
            empty_for_writing(k.shape, k.dtype, k.device).copy_(k)),
    }
    first = time.perf_counter()
    with torch.no_grad():  # the first posenc calls compile the kernels (Inductor's cache)
        for name in [n for n in rows if n.startswith("posenc")]:
            rows[name]()
    first = time.perf_counter() - first
    timed = _rounds(rows, rounds, threads, seconds,
                    lambda: _ggml(ggml_python, seq, dtype, threads))
    return [*timed, ("posenc's first three calls (compiling included)", [first])]


def _rounds(rows: dict[str, Any], rounds: int, threads: int, seconds: float,
            ggml: Any = None) -> list[tuple[str, list[float] | None]]:
    """Every row's median in each of ``rounds`` interleaved rounds (ggml's worker runs at the
    start of each round). The table reads the least (on a shared machine a row timed while
    another process runs only ever gets slower) and the spread of the ratios within rounds."""
    times: dict[str, list[float] | None] = {}
    for _ in range(rounds):
        peer = ggml() if ggml is not None else None
        for name, fn in rows.items():
            if fn is None or (isinstance(fn, str) and peer is None):
                times[name] = None
                continue
            suffix = {"median": "", "least": "_least", "cpu": "_cpu"}[STAT]
            t = peer[fn + suffix] if isinstance(fn, str) else _time(fn, threads, seconds)
            times[name] = [*(times.get(name) or []), t]
    return list(times.items())


def decode_rows(threads: int, seconds: float, rounds: int) -> list[tuple[str, list[float] | None]]:
    q, k = (torch.randn(1, h, 1, DIM) for h in HEADS)
    ids = torch.tensor([4096])
    table = pe.RotaryEmbedding(DIM, base=BASE, max_positions=8192)
    exact = pe.RotaryEmbedding(DIM, base=BASE)
    hf = _transformers(1)
    return _rounds({
        "transformers Llama rotary": None if hf is None else lambda: hf(q, k, ids[None]),
        "posenc RotaryEmbedding (table)": lambda: table(q, ids, k=k),
        "posenc RotaryEmbedding (no table: exact phases per call)": lambda: exact(q, ids, k=k),
    }, rounds, threads, seconds)


def _fmt(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} us"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seq", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--dtype", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=1.0, help="min run time per row")
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds; each row reports its least median")
    parser.add_argument("--ggml-python", default=os.environ.get(
        "POSENC_GGML_PYTHON", "/work/envs/ggml/bin/python"))
    parser.add_argument("--stat", choices=("median", "least", "cpu"), default="median",
                        help="median wall time; least: a row's least block (what a shared "
                             "machine leaves undisturbed); cpu: mean CPU time of a call, all "
                             "threads (time taken by other processes not counted)")
    args = parser.parse_args()
    global STAT
    STAT = args.stat
    torch.set_num_threads(args.threads)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"torch {torch.__version__}, {args.threads} threads, {args.rounds} rounds, "
          f"{STAT} times, load average {load:.2f} at start\n")
    print("| case | row | median | of copy | vs ggml | vs ggml, each round |\n"
          "|---|---|---:|---:|---:|---:|")
    for seq in args.seq:
        for dtype in args.dtype:
            rows = prefill_rows(seq, dtype, args.threads, args.seconds, args.ggml_python,
                                args.rounds)
            copy, ggml = rows[0][1], rows[1][1]
            for name, ts in rows:
                if name.startswith("posenc's first"):
                    print(f"| {seq} {dtype} | {name} | {_fmt(ts[0])} | | | |", flush=True)
                    continue
                t = None if ts is None else min(ts)
                frac = "n/a" if t is None else f"{min(copy) / t:.2f}"
                vs = "n/a" if t is None or ggml is None else f"{t / min(ggml):.2f}x"
                print(f"| {seq} {dtype} | {name} | {_fmt(t)} | {frac} | {vs} | "
                      f"{_spread(ts, ggml)} |", flush=True)
    rows = decode_rows(args.threads, args.seconds, args.rounds)
    ref = rows[0][1]
    for name, ts in rows:
        t = None if ts is None else min(ts)
        vs = "n/a" if t is None or ref is None else f"{t / min(ref):.2f}x transformers"
        print(f"| decode 1 token | {name} | {_fmt(t)} | | {vs} | {_spread(ts, ref)} |")
    if hasattr(os, "getloadavg"):
        print(f"\nload average {os.getloadavg()[0]:.2f} at the end")


def _spread(times: list[float] | None, ref: list[float] | None) -> str:
    """The least and greatest of the per-round ratios ``times[r] / ref[r]``."""
    if times is None or ref is None or len(times) != len(ref):
        return "n/a"
    ratios = [t / r for t, r in zip(times, ref, strict=True)]
    return f"{min(ratios):.2f}-{max(ratios):.2f}"


if __name__ == "__main__":
    main()
