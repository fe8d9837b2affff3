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
its worker's median of 20 runs) over ``--rounds`` interleaved rounds; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch
import torch.utils.benchmark as benchmark

from posenc.backends import torch as pe

BASE = 500000.0
HEADS = (32, 8)
DIM = 128


def _time(fn: Any, threads: int, seconds: float) -> float:
    with torch.no_grad():
        fn()
        timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
        return timer.blocked_autorange(min_run_time=seconds).median


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
                 rounds: int) -> list[tuple[str, float | None]]:
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
    }
    return _rounds(rows, rounds, threads, seconds,
                   lambda: _ggml(ggml_python, seq, dtype, threads))


def _rounds(rows: dict[str, Any], rounds: int, threads: int, seconds: float,
            ggml: Any = None) -> list[tuple[str, float | None]]:
    """The least of each row's medians over ``rounds`` interleaved rounds: on a shared machine
    a row timed while another process runs only ever gets slower."""
    best: dict[str, float | None] = {}
    for _ in range(rounds):
        peer = ggml() if ggml is not None else None
        for name, fn in rows.items():
            if fn is None or (isinstance(fn, str) and peer is None):
                best[name] = None
                continue
            t = peer[fn] if isinstance(fn, str) else _time(fn, threads, seconds)
            best[name] = t if best.get(name) is None else min(best[name], t)
    return list(best.items())


def decode_rows(threads: int, seconds: float, rounds: int) -> list[tuple[str, float | None]]:
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
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"torch {torch.__version__}, {args.threads} threads, {args.rounds} rounds, "
          f"load average {load:.2f} at start\n")
    print("| case | row | median | of copy | vs ggml |\n|---|---|---:|---:|---:|")
    for seq in args.seq:
        for dtype in args.dtype:
            rows = prefill_rows(seq, dtype, args.threads, args.seconds, args.ggml_python,
                                args.rounds)
            copy, ggml = rows[0][1], rows[1][1]
            for name, t in rows:
                frac = "n/a" if t is None else f"{copy / t:.2f}"
                vs = "n/a" if t is None or ggml is None else f"{t / ggml:.2f}x"
                print(f"| {seq} {dtype} | {name} | {_fmt(t)} | {frac} | {vs} |", flush=True)
    rows = decode_rows(args.threads, args.seconds, args.rounds)
    ref = rows[0][1]
    for name, t in rows:
        vs = "n/a" if t is None or ref is None else f"{t / ref:.2f}x transformers"
        print(f"| decode 1 token | {name} | {_fmt(t)} | | {vs} |")


if __name__ == "__main__":
    main()
