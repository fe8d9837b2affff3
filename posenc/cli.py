"""The ``posenc`` command: list, golden regen/check, conformance, check, export, report merge,
bench, plot, docs."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from . import params
from .errors import PosencError

COUNT = params.option("int", minimum=1)  # a count of at least 1 (examples, workers, dpi)


def _cmd_list(args: argparse.Namespace) -> int:
    from .catalog import specs

    rows = [("id", "family", "function", "cases", "properties", "title")]
    for spec in specs().values():
        rows.append((spec.id, spec.family, spec.function, str(len(spec.cases)),
                     str(len(spec.properties)), spec.title))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1])
    return 0


def _cmd_golden_regen(args: argparse.Namespace) -> int:
    from . import golden

    for spec_id, action in golden.regen(args.ids, everything=args.all):
        print(f"{action:9s} {spec_id}")
    return 0


def _cmd_golden_check(args: argparse.Namespace) -> int:
    from . import golden

    problems = golden.check(ids=args.ids)
    for problem in problems:
        print(problem)
    if problems:
        print(f"golden check: {len(problems)} problem(s); run `posenc golden regen` and review "
              "the diff", file=sys.stderr)
        return 1
    print("golden check: all goldens match their specs and references")
    return 0


def _cmd_report_merge(args: argparse.Namespace) -> int:
    from posenc.conformance.reports import html_report, merge

    if not (args.output or args.html or args.junit):
        raise PosencError("report merge: give -o MERGED.json, --html PAGE.html, "
                          "--junit PATH or several")
    merged = merge.merge(merge.load(Path(path)) for path in args.reports)
    if args.expect_shards is not None:
        merge.check_shards(merged, args.expect_shards)
    if args.output:
        merge.write(merged, Path(args.output))
    if args.html:
        html_report.write(merged, Path(args.html))
    from posenc.conformance.reports.report import matrix, to_junit

    results = merge.as_results(merged)
    if args.junit:
        to_junit(results, Path(args.junit))
    print(matrix(results))
    counts = ", ".join(f"{n} {s}" for s, n in sorted(merged["summary"].items()))
    print(f"merged {len(args.reports)} report(s), {len(merged['sources'])} run(s): "
          f"{len(merged['results'])} checks ({counts}); {len(merged['conflicts'])} conflict(s)")
    shown = 20
    for check_id in merged["conflicts"][:shown]:
        statuses = ", ".join(f"{merged['sources'][e['source']]['name']}: {e['status']}"
                             for e in merged["results"][check_id])
        print(f"conflict {check_id} ({statuses})")
    if len(merged["conflicts"]) > shown:
        print(f"... and {len(merged['conflicts']) - shown} more conflicts (see the report)")
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
    from . import plot

    params = plot.parse_params(args.param or [])
    path = plot.plot(args.id, args.output or f"{args.id}.png", params, dpi=args.dpi)
    print(f"wrote {path}")
    return 0


def _checked(command: str, problems: list[str], up_to_date: str) -> int:
    """The exit code of a generator's ``--check``, each problem printed."""
    for problem in problems:
        print(problem)
    if problems:
        print(f"{command.split()[-1]} check: {len(problems)} problem(s); run `{command}`",
              file=sys.stderr)
        return 1
    print(up_to_date)
    return 0


def _cmd_docs(args: argparse.Namespace) -> int:
    from . import docs

    out = Path(args.out)
    if args.check:
        return _checked("posenc docs", docs.check(out), f"docs check: {out / docs.MARKDOWN}, "
                        f"{out / docs.FUNCTIONS} and the plots are up to date")
    written = docs.write(out, images=not args.no_images, dpi=args.dpi)
    plots = [path for path in written if path.suffix == ".png"]
    print(f"wrote {written[0]}, {written[1]}" + (f" and {len(plots)} plots" if plots else ""))
    return 0


def _cmd_stubs(args: argparse.Namespace) -> int:
    from posenc.backends import stubs

    root = Path(args.root)
    if args.check:
        return _checked("posenc stubs", stubs.check(root), "stubs check: up to date")
    for path in stubs.write(root):
        print(f"wrote {path}")
    return 0


def _cmd_peers(args: argparse.Namespace) -> int:
    from posenc.conformance.reports import scoreboard

    if args.max_examples is None:
        args.max_examples = scoreboard.MAX_EXAMPLES
    return scoreboard.main_args(args)


def _cmd_sweep(args: argparse.Namespace) -> int:
    from posenc.conformance.sweeps import command

    return command.main_args(args)


def _cmd_bench(args: argparse.Namespace) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from . import bench

    return bench.main_args(args)


def _add_golden(sub: argparse._SubParsersAction) -> None:
    golden = sub.add_parser("golden", help="regenerate or check the goldens")
    gsub = golden.add_subparsers(dest="golden_command", required=True)
    p = gsub.add_parser("regen", help="rewrite goldens whose spec or reference changed")
    p.add_argument("ids", nargs="*", help="encodings to rewrite (default: the changed ones)")
    p.add_argument("--all", action="store_true", help="rewrite every golden")
    p.set_defaults(func=_cmd_golden_regen)
    p = gsub.add_parser("check", help="fail on missing, orphaned, stale, corrupt or drifted goldens")
    p.add_argument("ids", nargs="*", help="encodings to check (default: all)")
    p.set_defaults(func=_cmd_golden_check)


def _add_export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write the golden cases as a test-vector corpus for any "
                                      "language (JSON + raw arrays + a JSON Schema)")
    from posenc.conformance.corpus import export as corpus_export  # imports no framework

    corpus_export.add_arguments(p)
    p.set_defaults(func=corpus_export.main)


def _add_report(sub: argparse._SubParsersAction) -> None:
    reports = sub.add_parser("report", help="combine conformance reports")
    rsub = reports.add_subparsers(dest="report_command", required=True)
    p = rsub.add_parser("merge", help="merge JSON reports of several runs (e.g. a CPU and a GPU "
                                      "machine) into one matrix; conflicting results are shown")
    p.add_argument("reports", nargs="+", metavar="REPORT.json",
                   help="reports of `posenc conformance --json` or of an earlier merge")
    p.add_argument("-o", "--output", metavar="MERGED.json", help="write the merged JSON report")
    p.add_argument("--html", metavar="PAGE.html", help="write the merged report as an HTML page")
    p.add_argument("--junit", metavar="PATH", help="write the merged results as JUnit XML (a "
                   "conflict is a failure)")
    p.add_argument("--expect-shards", metavar="N", type=COUNT, help="refuse unless the reports "
                   "are exactly shards 1..N of one plan (`--shard K/N` runs): a lost shard "
                   "report is an error, not a smaller green matrix")
    p.set_defaults(func=_cmd_report_merge)


def _add_generators(sub: argparse._SubParsersAction) -> None:
    """The commands that regenerate files of the checkout from the specs."""
    p = sub.add_parser("docs", help="generate docs/encodings.md, docs/functions.md and the "
                                    "plots from spec/")
    p.add_argument("--out", default="docs", metavar="DIR", help="output folder (default: docs)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; fail when the markdown is stale or a plot is missing")
    p.add_argument("--no-images", action="store_true", help="write only the markdown")
    p.add_argument("--dpi", type=COUNT, default=72, help="plot resolution (default 72)")
    p.set_defaults(func=_cmd_docs)

    p = sub.add_parser("stubs", help="generate the type stubs of posenc and its backend modules "
                                     "from the specs")
    p.add_argument("--root", default=".", metavar="DIR",
                   help="the checkout (default: the current folder)")
    p.add_argument("--check", action="store_true", help="write nothing; fail when a stub is stale")
    p.set_defaults(func=_cmd_stubs)


def _add_plot(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plot", help="draw an encoding (needs the 'plot' extra: matplotlib)")
    p.add_argument("id", help="the encoding (see `posenc list`)")
    p.add_argument("--param", action="append", metavar="KEY=VALUE",
                   help="an encoding parameter, written as in a spec (repeatable), e.g. "
                        "base=500000 or 'scaling={rope_type: llama3, factor: 8.0}'")
    p.add_argument("-o", "--output", metavar="FILE.png", help="default: ID.png")
    p.add_argument("--dpi", type=COUNT, default=100, help="resolution (default 100)")
    p.set_defaults(func=_cmd_plot)


def _add_peers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("peers", help="run every installed peer adapter (peer:NAME) and write "
                                     "docs/peers.md, the scoreboard")
    p.add_argument("--out", default="docs", metavar="DIR", help="output folder (default: docs)")
    p.add_argument("--peer", action="append", metavar="NAME",
                   help="run only this peer (repeatable; default: every peer)")
    p.add_argument("--max-examples", type=COUNT, default=None,
                   help="Hypothesis examples per property (default: the scoreboard's)")
    p.add_argument("--check", action="store_true",
                   help="run nothing; fail when docs/peers.md is stale")
    p.add_argument("--reports", metavar="DIR", help="write each peer's run to "
                   "DIR/peer-NAME.json instead of the page (what each nox group does)")
    p.add_argument("--from-reports", metavar="DIR", help="write the page taking each peer's "
                   "run from DIR/peer-NAME.json where there is one (.nox/reports after "
                   "`nox -s peers`), running the others here")
    p.set_defaults(func=_cmd_peers)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="posenc", description="Transformer positional encodings: spec, goldens, conformance.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list the specified encodings")
    p.set_defaults(func=_cmd_list)

    _add_golden(sub)

    p = sub.add_parser("conformance", help="check backends against goldens and properties")
    from posenc.conformance.cli import conformance  # imports no framework

    conformance.add_arguments(p)
    p.set_defaults(func=conformance.main)

    p = sub.add_parser("check", help="check ONE function with its own signature against a "
                                     "spec (scope, grade, diagnoses)")
    from posenc.conformance.cli import check as check_cli  # imports no framework

    check_cli.add_arguments(p)
    p.set_defaults(func=check_cli.main)

    _add_export(sub)
    _add_report(sub)

    _add_plot(sub)

    _add_generators(sub)

    _add_peers(sub)

    p = sub.add_parser("sweep", help="check every model family of transformers or an engine "
                                     "(mlx-lm); --from-reports writes docs/engines.md")
    from posenc.conformance.sweeps import command as sweep_command  # imports no framework

    sweep_command.add_arguments(p)
    p.set_defaults(func=_cmd_sweep)

    p = sub.add_parser("bench", help="time posenc against its rivals (transformers, "
                                     "rotary-embedding-torch, keras-hub, hand-written jnp)")
    from .bench import add_arguments  # imports no framework

    add_arguments(p)
    p.set_defaults(func=_cmd_bench)

    from .dialects import command as translate_command  # imports no framework

    p = sub.add_parser("translate", help="a rope config in another ecosystem's terms "
                                         "(transformers -> vllm, ggml, onnx; and back)")
    translate_command.add_arguments(p)
    p.set_defaults(func=translate_command.main_args)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except PosencError as exc:
        print(f"posenc: error: {exc}", file=sys.stderr)
        return 2


