"""Times llama.cpp's ``ggml_rope_ext`` (ggml-python, ggml-cpu) on q and k, and ggml's own copy.

Run by ``benchmarks/rotary_module_cpu.py`` in the Python that has ggml-python installed (a
subprocess: ggml and torch stay out of each other's process):

    python benchmarks/ggml_rope_worker.py --seq 4096 --dtype f32 --threads 2

Prints one JSON object: the median seconds of ``rope`` (q ``[S, 32, 128]`` and k ``[S, 8, 128]``,
ggml's ``[dim, heads, seq]``, neox mode as Llama's half layout, theta 500000, in place as
llama.cpp's graph runs it) and of ``copy`` (``ggml_cpy`` of q and k into preallocated tensors).
``rope_least`` and ``copy_least`` are the least of the runs, ``rope_cpu`` and ``copy_cpu`` the
mean CPU time of a run (all threads, user and system). ggml-cpu's rope takes float32 and
float16 (no bfloat16).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def _seconds(run, repeats: int) -> tuple[float, float, float]:
    """The median and the least of ``repeats`` timed runs after a warm-up run, and their mean
    CPU time (every thread of the process, user and system; the clock ticks too coarsely to
    time one run)."""
    run()
    times = []
    start_cpu = time.process_time()
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    cpu = (time.process_time() - start_cpu) / repeats
    return float(np.median(times)), float(np.min(times)), cpu


def _graph(ggml, ctx, nodes):
    graph = ggml.ggml_new_graph(ctx)
    for node in nodes:
        ggml.ggml_build_forward_expand(graph, node)
    return graph


def main() -> None:
    import ggml
    import ggml.utils

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--heads", type=int, nargs=2, default=(32, 8))
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--dtype", choices=("f32", "f16"), default="f32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    dtype = np.float32 if args.dtype == "f32" else np.float16
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((args.seq, h, args.dim)).astype(dtype) for h in args.heads]
    positions = np.arange(args.seq, dtype=np.int32)
    size = 3 * sum(x.nbytes for x in xs) + positions.nbytes + 64 * ggml.ggml_tensor_overhead() \
        + 4 * ggml.ggml_graph_overhead() + (1 << 24)
    ctx = ggml.ggml_init(ggml.ggml_init_params(mem_size=size, mem_buffer=None))
    try:
        tensors = [ggml.utils.from_numpy(x, ctx) for x in xs]
        pos = ggml.utils.from_numpy(positions, ctx)
        ropes = [ggml.ggml_rope_ext_inplace(ctx, t, pos, None, args.dim, 2, 0, 500000.0, 1.0,
                                            0.0, 1.0, 32.0, 1.0) for t in tensors]
        copies = [ggml.ggml_cpy(ctx, t, ggml.ggml_dup_tensor(ctx, t)) for t in tensors]
        rope_graph, copy_graph = _graph(ggml, ctx, ropes), _graph(ggml, ctx, copies)

        def run(graph):
            return lambda: ggml.ggml_graph_compute_with_ctx(ctx, graph, args.threads)

        rope, copy = _seconds(run(rope_graph), args.repeats), _seconds(run(copy_graph), args.repeats)
        result = {"rope": rope[0], "copy": copy[0], "rope_least": rope[1],
                  "copy_least": copy[1], "rope_cpu": rope[2], "copy_cpu": copy[2],
                  "version": _version()}
    finally:
        ggml.ggml_free(ctx)
    print(json.dumps(result))


def _version() -> str:
    from importlib.metadata import version

    return version("ggml-python")


if __name__ == "__main__":
    main()
