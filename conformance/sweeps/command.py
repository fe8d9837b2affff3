"""The ``posenc sweep`` command: ``posenc sweep transformers`` (the transformers sweep),
``posenc sweep mlx-lm`` and ``posenc sweep llama.cpp`` (engine sweeps, each in the engine's own
environment: ``nox -s sweeps``) and ``posenc sweep --from-reports DIR`` (the merged page, docs/engines.md)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from ..reports.scoreboard import freshness_exit
from . import engine_page
from .engine_report import REPORT, code_hash, counts, write_report
from .registry import sweep_module

LIBRARIES = ("transformers", "mlx-lm", "llama.cpp", "vllm")
NOT_YET: dict[str, str] = {}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("library", nargs="?", choices=LIBRARIES,
                        help="the library or engine to sweep (none: with --from-reports)")
    parser.add_argument("--family", action="append", metavar="NAME",
                        help="a family (its folder under transformers.models, e.g. llama, "
                             "gpt_neox; repeatable; default: every family found)")
    parser.add_argument("--json", metavar="PATH", help="write the verdicts as JSON")
    parser.add_argument("--out", default="docs", metavar="DIR",
                        help="where a full run writes its page or report (default: docs)")
    parser.add_argument("--check", action="store_true",
                        help="run nothing; fail when the page (or the engine's recorded "
                             "report) is stale")
    parser.add_argument("--from-reports", metavar="DIR",
                        help="merge DIR/sweep-<engine>.json into OUT/engines.md")
    parser.add_argument("--truth", metavar="PATH",
                        help="an engine sweep: the transformers sweep's JSON, whose pairing "
                             "and unrotated layers per family the engine is held to")


def truth(path: str | None) -> dict[str, dict[str, Any]]:
    """family -> {"pairings": ..., "unrotated": layer indices} from the transformers report:
    where transformers' module leaves a layer unrotated that posenc's reader rotates (a
    "spec gap" row), the module is the truth."""
    if not path:
        return {}
    from .transformers_checks import NOT_ROTATED

    out = {}
    for row in json.loads(Path(path).read_text(encoding="utf-8"))["families"]:
        unrotated = {int(f["what"].split()[1]) for f in row.get("findings", [])
                     if f.get("note") == NOT_ROTATED and row["verdict"] == "spec gap"}
        pairings = tuple(p for p in (row.get("pairing") or "").split("/") if p)
        out[row["family"]] = {"pairings": pairings, "unrotated": unrotated}
    return out


def _run_engine(args: argparse.Namespace) -> int:
    from posenc.conformance.sweeps import transformers_families as observer

    module = sweep_module(args.library)
    if problem := observer.unknown_families(args.family):
        print(problem, file=sys.stderr)
        return 2
    start = time.perf_counter()
    try:
        rows = module.sweep(observer.discover(args.family), truth(args.truth),
                            lambda name: print(f"sweeping {name} ...", file=sys.stderr,
                                               flush=True))
    except ImportError as exc:  # the engine is not in this environment
        print(f"posenc: error: posenc sweep {args.library} runs {args.library}'s own code, and "
              f"this environment lacks it ({exc}); build its environment with `nox -s "
              f"sweep-{args.library}` (requirements: peers/sweeps/{args.library}.txt)",
              file=sys.stderr)
        return 2
    seconds = time.perf_counter() - start
    for row in rows:
        print(f"{row.family:32s} {row.verdict:14s} {row.profile or '':13s} "
              f"{row.max_abs:9.2e} {row.reason}")
    print(f"{len(rows)} families in {seconds:.0f} s: "
          + ", ".join(f"{n} {k}" for k, n in sorted(counts(rows).items())))
    versions = module.versions()
    code = code_hash(module.sweep_files(), f"{args.library} {versions[args.library]}")
    targets = [Path(args.json)] if args.json else []
    if not args.family:
        targets.append(Path(args.out) / REPORT.format(args.library))
    for target in targets:
        write_report(target, args.library, versions, seconds, rows, code)
        print(f"wrote {target}")
    return 0


def main_args(args: argparse.Namespace) -> int:
    if args.from_reports:
        out = Path(args.out)
        if args.check:
            return freshness_exit(engine_page.check(out), out / engine_page.MARKDOWN)
        print(f"wrote {engine_page.write(Path(args.from_reports), out)}")
        return 0
    if args.library is None:
        print("posenc: error: name a library to sweep, or --from-reports DIR", file=sys.stderr)
        return 2
    if args.library == "transformers":
        from . import transformers_sweep as family_sweep
        from . import vllm_torchvision

        # in vLLM's environment (its torchvision without a loadable _C), transformers' image
        # utilities import torchvision too: the truth nox -s sweep-vllm sweeps there
        vllm_torchvision.allow_import()
        return family_sweep.main_args(args)
    if args.library in NOT_YET:
        print(f"posenc: error: {NOT_YET[args.library]}", file=sys.stderr)
        return 2
    if args.check:
        out = Path(args.out)
        return freshness_exit(engine_page.check(out), out / engine_page.MARKDOWN)
    return _run_engine(args)
