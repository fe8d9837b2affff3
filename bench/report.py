"""What a run reports: ratios against each case's reference row, the text table, the issue
targets (indicative, never asserted), the package versions, and the JSON report."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import platform
from collections.abc import Callable
from typing import Any

from .rows import BenchCase, Row
from .sizes import Sizes


def fill_ratios(cases: list[BenchCase], rows: dict[str, Row]) -> None:
    for case in cases:
        first = case.planned[0].id
        for planned in case.planned:
            row = rows[planned.id]
            if planned.id == first:
                continue
            row.vs = planned.vs or first
            ref = rows.get(row.vs)
            if row.median_s and ref is not None and ref.median_s:
                row.ratio = row.median_s / ref.median_s
        copy = rows.get(f"{first.rsplit('/', 1)[0]}/copy")
        for planned in case.planned:
            row = rows[planned.id]
            if copy is not None and copy.bandwidth_gbs and row.bandwidth_gbs:
                row.of_copy = row.bandwidth_gbs / copy.bandwidth_gbs


def _fmt_time(seconds: float) -> str:
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def table(cases: list[BenchCase], rows: dict[str, Row]) -> str:
    width = max(len(planned.label) for case in cases for planned in case.planned)
    lines = []
    for case in cases:
        lines.append(f"\n{case.title}")
        for planned in case.planned:
            row = rows[planned.id]
            if row.status != "ok":
                lines.append(f"  {row.label:{width}s}  {row.status}: {row.detail}")
                continue
            if row.vs is None:
                ratio = "reference"
            else:
                ratio = f"{row.ratio:.2f}x" if row.ratio is not None else "-"
                ratio += f" vs {row.vs.rsplit('/', 1)[-1]}"
            note = f"  [{row.note}]" if row.note else ""
            if row.bandwidth_gbs:
                note = f"  {row.bandwidth_gbs:6.0f} GB/s" + (
                    f" = {row.of_copy:4.2f} of copy" if row.of_copy else "") + note
            lines.append(f"  {row.label:{width}s}  {_fmt_time(row.median_s):>10s}  {ratio}{note}")
    return "\n".join(lines)


TARGETS = (  # (row id pattern, target ratio, what): the goals; never asserted
    ("rope/{seq}/torch/posenc-rope", 1.0, "torch plain API <= 1.0x transformers eager"),
    ("rope/{seq}/torch/posenc-inplace", 0.25, "torch in-place <= 0.25x transformers eager"),
    ("rope/{seq}/torch/posenc-out", 0.25, "torch out= <= 0.25x transformers eager"),
    ("rope/{seq}/xla/posenc-jax", 1.15, "JAX jit <= 1.15x the jnp rotary under jit"),
    ("rope/{seq}/xla/posenc-tf", 1.2, "TF XLA <= 1.2x posenc JAX jit"),
)


def targets(sizes: Sizes, rows: dict[str, Row]) -> list[dict[str, Any]]:
    out = []
    for pattern, goal, what in TARGETS:
        for seq in sizes.seqs:
            row = rows.get(pattern.format(seq=seq))
            if row is not None:
                out.append({"id": row.id, "target": goal, "ratio": row.ratio, "what": what,
                            "met": None if row.ratio is None else row.ratio <= goal})
    return out


def gpu_targets(rows: dict[str, Row]) -> list[dict[str, Any]]:
    """The GPU issue's goals: the kernel at >= 85% of copy bandwidth from 16K tokens, and no
    slower than the best installed rival kernel at each shape."""
    out = []
    for key in {r.id.rsplit("/", 1)[0] for r in rows.values() if r.id.startswith("gpu/")}:
        ours = rows.get(f"{key}/posenc-triton-kernel")
        if ours is None or not ours.median_s:
            continue
        shape = key.split("/")[1].split("-")[0]  # "1x16384" or "1x16384-float32"
        batch, seq = (int(n) for n in shape.split("x"))
        if batch * seq >= 16384 and ours.of_copy is not None:
            out.append({"id": ours.id, "what": "kernel >= 0.85 of copy bandwidth (>= 16K tokens)",
                        "target": 0.85, "value": ours.of_copy, "met": ours.of_copy >= 0.85})
        rivals = [r for name in ("liger", "flash-attn", "transformers-compiled")
                 if (r := rows.get(f"{key}/{name}")) is not None and r.median_s]
        if rivals:
            best = min(rivals, key=lambda r: r.median_s)
            value = ours.median_s / best.median_s
            out.append({"id": ours.id, "what": f"<= 1.0x the best rival ({best.id.rsplit('/')[-1]})",
                        "target": 1.0, "value": value, "met": value <= 1.0})
    return sorted(out, key=lambda t: (t["id"], t["what"]))


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for name in ("posenc", "torch", "triton", "transformers", "rotary-embedding-torch",
                 "liger-kernel", "flash-attn", "jax", "jaxlib", "tensorflow", "keras", "keras-hub",
                 "numpy"):
        with contextlib.suppress(PackageNotFoundError):
            out[name] = version(name)
    return out


def report(cases: list[BenchCase], rows: dict[str, Row], sizes: Sizes, *, quick: bool,
           suites: tuple[str, ...], device: str, threads: int | None) -> dict[str, Any]:
    """The JSON report: the run's metadata, the cases, every row, and the targets."""
    if threads is None:
        with contextlib.suppress(ImportError):
            import torch

            threads = torch.get_num_threads()
    meta = {"quick": quick, "suites": list(suites), "device": device,
            "threads": threads, "cpu_count": os.cpu_count(), "machine": platform.machine(),
            "processor": platform.processor(), "min_run_time_s": sizes.min_run_time,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "versions": versions(), "sizes": dataclasses.asdict(sizes)}
    return {"meta": meta,
            "cases": [{"key": c.key, "suite": c.suite, "title": c.title,
                       "rows": [p.id for p in c.planned]} for c in cases],
            "rows": [dataclasses.asdict(rows[p.id]) for c in cases for p in c.planned],
            "targets": targets(sizes, rows), "gpu_targets": gpu_targets(rows)}


def echo_report(cases: list[BenchCase], rows: dict[str, Row], result: dict[str, Any],
                tf_threads: int | None, echo: Callable[[str], None]) -> None:
    """The table, the targets and a footer of settings and versions."""
    echo(table(cases, rows))
    lines = [f"  {t['what']:45s} {t['id']:34s} "
             + ("-" if t["ratio"] is None else f"{t['ratio']:.2f}x") for t in result["targets"]]
    lines += [f"  {t['what']:45s} {t['id']:34s} {t['value']:.2f}"
              for t in result["gpu_targets"]]
    if lines:
        echo("\nissue targets (indicative; benchmarks are never tests):\n" + "\n".join(lines))
    meta = result["meta"]
    echo(f"\n(float32; torch threads {meta['threads']}, TensorFlow intra-op threads "
         f"{tf_threads or 'default'}, JAX/XLA its default pool; timings on a busy machine are "
         f"indicative only; {', '.join(f'{k} {v}' for k, v in meta['versions'].items())})")
