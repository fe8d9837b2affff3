"""The peer scoreboard: every installed peer adapter run through the harness, written to
docs/peers.md (``posenc peers``; ``posenc peers --check`` says whether it is stale).

One run per peer: eager, float32 plus bfloat16 and float16 where the adapter takes them, the encodings it
overrides, ``--precision reduced`` so that every check is graded with the tightest profile it
meets (exact, conventional, reduced): the columns of each profile count the checks graded at
or above it, and no number in the page is typed by hand. Properties draw ``MAX_EXAMPLES``
Hypothesis examples each (the whole run takes a few minutes on two cores).

Peers whose pins conflict run in their own environments (noxfile.py, peers/envs/GROUP.txt):
there ``posenc peers --peer NAME --reports DIR`` runs the same checks and writes
``DIR/peer-NAME.json`` (the conformance report, plus the peer's versions, the run's seconds,
Hypothesis examples and the inputs hash), and ``posenc peers --from-reports DIR`` writes the
page from those reports, running in-process the peers that have none. A report made from other
adapters, harness code or specs (another inputs hash) or other settings is refused by name,
so the page is still one run of the current inputs.

Freshness: the page records a hash of what its results depend on in this repository (the
adapters, the harness's comparison and grading code, this module and the specs with their
goldens); the docs test recomputes it without running any peer. Peer versions are printed,
not hashed: a newer peer means regenerating the page on purpose.
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import hashlib
import importlib.metadata
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from posenc.backends import get_backend
from posenc.backends.peers import ENGINES, PEERS, PeerBackend
from posenc.catalog import specs
from posenc.errors import PosencError
from posenc.paths import golden_dir
from posenc.specs import canonical_hash

from ..runner import Check, Options, Result, run
from ..tolerances import PROFILES
from .report import LIFTED, document

MAX_EXAMPLES = 10
DTYPES = ("float32", "bfloat16", "float16")
MARKDOWN = "peers.md"
# paths under conformance/ (this module lives in conformance/reports/)
HASHED = ("reports/scoreboard.py", "comparisons.py", "grading.py", "tolerances.py", "rotary_bound.py",
          "diagnose.py")
HASH_LINE = "<!-- inputs sha256: {} -->"
# what a grade below exact admits, when no diagnosis names the gap
PROFILE_MEANS = {"conventional": "float32 angles m·θ (the conventional profile's allowance)",
                 "reduced": "angles or cos/sin in bfloat16/float16 (the reduced profile)"}


REPORT = "peer-{}.json"  # a peer's report in a --reports / --from-reports folder
# one peer's run: its adapter, its results (or why it did not run), seconds, versions and
# where it ran (None: this process; else the report's file name)
Run = tuple[PeerBackend, "list[Result] | str", float, dict[str, str], "str | None"]


def peer_names() -> list[str]:
    """Every peer adapter: those of this environment, then the engines (their nox groups)."""
    return [f"peer:{name}" for name in {**PEERS, **ENGINES}]


def inputs_hash() -> str:
    """sha256 of the adapters, the harness code that grades and explains their results, the
    specs (diagnoses included) and the golden manifest."""
    peers = Path(sys.modules["posenc.backends.peers"].__file__).parent
    conformance = Path(__file__).parent.parent
    files = [*sorted(peers.glob("*.py")), *(conformance / name for name in HASHED)]
    digest = hashlib.sha256()
    for file in files:
        digest.update(f"{file.parent.name}/{file.name}".encode())
        digest.update(file.read_bytes().replace(b"\r\n", b"\n"))
    for spec_id, spec in sorted(specs().items()):
        digest.update(f"{spec_id}:{canonical_hash(spec.data)}".encode())
    digest.update((golden_dir() / "manifest.json").read_bytes())
    return digest.hexdigest()


def encodings_of(backend: PeerBackend) -> list[str]:
    return [s.id for s in specs().values() if s.function in backend.overrides]


def _dtype_free(spec_id: str) -> bool:
    """Integer results of integer inputs (bucket functions): the same checks in every dtype."""
    spec = specs()[spec_id]
    return spec.output_kind == "int" and not any(i.kind == "float" for i in spec.inputs)


def run_peer(backend: PeerBackend, max_examples: int = MAX_EXAMPLES,
             encodings: Iterable[str] | None = None,
             dtypes: Iterable[str] = DTYPES) -> list[Result]:
    """The peer's checks, graded; dtype-free encodings run in the first dtype only."""
    chosen = list(encodings or encodings_of(backend))
    dtypes = [d for d in dtypes if d in backend.dtypes]
    results: list[Result] = []
    for group, group_dtypes in (([e for e in chosen if _dtype_free(e)], dtypes[:1]),
                                ([e for e in chosen if not _dtype_free(e)], dtypes)):
        if group:
            results += run(Options(backends=[backend], encodings=group, dtypes=group_dtypes,
                                   modes=["eager"], max_examples=max_examples, gradients=False,
                                   precision=PROFILES[-1]))
    return results


# -- the page ------------------------------------------------------------------------------------
def _met(grades: list[str | None]) -> str:
    """The tightest profile every in-scope check meets."""
    if not grades:
        return "—"
    if any(g is None for g in grades):
        return "**none**"
    return max(grades, key=PROFILES.index)


def _met_of(scoped: list[Result]) -> str:
    """:func:`_met` of the checks a profile could judge, and how many none could."""
    judged = [r.grade for r in scoped if r.status != "unjudgeable"]
    blind = len(scoped) - len(judged)
    return _met(judged) + (f", {blind} not judgeable" if blind else "")


def _explanation(result: Result, notes: dict[str, str]) -> str:
    diagnosis = result.details.get("diagnosis") or (result.details.get("tighter") or {}).get(
        "diagnosis")
    if diagnosis:
        also = diagnosis.get("also") or []
        return (f"{diagnosis['title']} (`{diagnosis['name']}`): {diagnosis['explanation']}"
                + (f" (equally on this case: {', '.join(f'`{a}`' for a in also)})"
                   if also else ""))
    for pattern, note in notes.items():
        if fnmatch.fnmatchcase(result.check.id, pattern):
            return note
    if result.status == "pass" and result.grade in PROFILE_MEANS:
        return PROFILE_MEANS[result.grade]
    if result.status == "unjudgeable":  # one line for all: the numbers differ per check
        profile = (result.details.get("not_judgeable") or {}).get("profile", "asked")
        return (f"the {profile} profile's tolerance reaches a tenth of the values there: it "
                "cannot tell these from a bug (neither a pass nor a failure)")
    lines = [line.strip() for line in result.message.splitlines() if line.strip()]
    first = lines[0] if lines else result.status
    raised = next((line for line in lines if line.startswith("raised at ")), None)
    text = first if len(first) <= 160 else first[:157] + "..."
    return text + (f" ({raised.split('/')[-1]})" if raised else "")


def _verdict(result: Result) -> str:
    if result.status == "pass":
        return result.grade or "pass"
    return result.status


def table(peer: PeerBackend, results: list[Result]) -> list[str]:
    """The rows of one peer: encoding × dtype, coverage and the checks graded per profile."""
    lines = ["| encoding | dtype | in scope | " + " | ".join(PROFILES) + " | profile met |",
             "|---|---|---|" + "---|" * len(PROFILES) + "---|"]
    keyed: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        keyed.setdefault((r.check.encoding, r.check.dtype), []).append(r)
    for (encoding, dtype), group in sorted(keyed.items(), key=lambda kv: (
            kv[0][0], DTYPES.index(kv[0][1]) if kv[0][1] in DTYPES else len(DTYPES))):
        scoped = [r for r in group if r.status != "unsupported"]
        counts = [sum(r.grade is not None and PROFILES.index(r.grade) <= i for r in scoped)
                  for i in range(len(PROFILES))]
        lines.append(f"| {encoding} | {dtype} | {len(scoped)}/{len(group)} | "
                     + " | ".join(f"{c}/{len(scoped)}" for c in counts)
                     + f" | {_met_of(scoped)} |")
    return lines


def deviations(peer: PeerBackend, results: list[Result]) -> list[str]:
    """One line per (encoding, dtype, verdict, explanation), naming its checks."""
    groups: dict[tuple[str, str, str, str], list[str]] = {}
    for r in sorted(results, key=lambda r: (r.check.encoding, DTYPES.index(r.check.dtype)
                                            if r.check.dtype in DTYPES else len(DTYPES))):
        if r.status == "unsupported" or (r.status == "pass" and r.grade == PROFILES[0]):
            continue
        key = (r.check.encoding, r.check.dtype, _verdict(r), _explanation(r, peer.notes))
        groups.setdefault(key, []).append(f"{r.check.kind}:{r.check.name}")
    lines = []
    for (encoding, dtype, verdict, why), names in groups.items():
        shown = ", ".join(f"`{n}`" for n in names[:4]) + (
            f" and {len(names) - 4} more" if len(names) > 4 else "")
        lines.append(f"- {encoding} {dtype}, **{verdict}** ({len(names)}): {shown} — {why}")
    return lines or ["- none: every check in scope meets the exact profile"]


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _comparisons(peer: PeerBackend) -> list[str]:
    return [f"{function}: compared {how} (equal up to a constant per query row, the softmax "
            "the spec makes the contract)" for function, how in peer.comparisons.items()]


def markdown(runs: dict[str, Run], *, max_examples: int, digest: str) -> str:
    """The page, from each peer's results (or the reason it did not run)."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Peer scoreboard", "",
        "Other people's implementations of the specified encodings, run through posenc's "
        "harness by the adapters in [`backends/peers/`](../backends/peers/) "
        "(`posenc conformance --backend peer:NAME`). Generated by `posenc peers` from one "
        "run; do not edit by hand.", "",
        f"Run: {now} on {platform.machine()} {platform.system()} ({os.cpu_count()} cores), "
        f"Python {platform.python_version()}, posenc {_version('posenc')}, eager mode, "
        f"{', '.join(DTYPES)} where the adapter takes them, {max_examples} Hypothesis examples "
        f"per property, Keras backend `{os.environ.get('KERAS_BACKEND', 'default')}`.", "",
        "Bucket functions (integer in, integer out) run in float32 only. "
        "Columns: **in scope** is the checks the peer implements out of the spec's total for "
        "that dtype (the rest report `unsupported` with the adapter's reason); **exact**, "
        "**conventional**, **reduced** count the in-scope checks that meet each precision "
        "profile (`--precision`; conventional admits float32 angles m·θ, reduced angles or "
        "cos/sin held in bfloat16/float16); **profile met** is the tightest profile every "
        "in-scope check meets (none: some check fails or errors under all three), with the "
        "checks that profile cannot judge (its tolerance reaches a tenth of the values) "
        "counted apart as not judgeable. Every check "
        "below exact is listed under the table with the diagnosis posenc matched, the "
        "adapter's note on a known deviation, or the failure's first line. A result marked "
        "*(report)* ran in its nox group's environment (`nox -s GROUP`, peers/envs/) and was "
        "merged from its JSON report by `posenc peers --from-reports`, with the versions "
        "recorded there.", "",
        "| peer | versions | result |", "|---|---|---|"]
    for name, (peer, results, seconds, recorded, source) in runs.items():
        versions = ", ".join(f"{p} {recorded.get(p, 'not installed')}" for p in peer.version_of)
        if isinstance(results, str):
            lines.append(f"| `{name}` | {versions} | {results} |")
            continue
        scoped = [r for r in results if r.status != "unsupported"]
        bad = {s: sum(r.status == s for r in scoped) for s in ("fail", "error")}
        bad_text = ", ".join(f"{n} {'failing' if s == 'fail' else 'erroring'}"
                             for s, n in bad.items() if n)
        lines.append(f"| `{name}` | {versions} | profile met: {_met_of(scoped)}"
                     + (f" ({bad_text})" if bad_text else "")
                     + f"; {len(scoped)}/{len(results)} checks in scope; {seconds:.0f} s"
                     + (" *(report)*" if source else "") + " |")
    for name, (peer, results, *_) in runs.items():
        if isinstance(results, str):
            continue
        lines += ["", f"## `{name}`", "", _summary(name), ""]
        lines += [*table(peer, results), ""]
        lines += [f"- {c}" for c in _comparisons(peer)]
        lines += deviations(peer, results)
    lines += ["", HASH_LINE.format(digest), ""]
    return "\n".join(lines)


def _summary(name: str) -> str:
    short = name.removeprefix("peer:")
    module = sys.modules[f"posenc.backends.peers.{PEERS.get(short) or ENGINES[short]}"]
    return " ".join((module.__doc__ or "").strip().split("\n\n")[0].split())


def _peer(name: str) -> PeerBackend:
    peer = get_backend(name)
    assert isinstance(peer, PeerBackend), name
    return peer


def run_here(peer: PeerBackend, max_examples: int,
             progress: Callable[[str], None] | None = None) -> Run:
    """One peer run in this process (or why it cannot run here)."""
    versions = {p: _version(p) for p in peer.version_of}
    gone = peer.missing()
    if gone is not None:
        return peer, f"not installed here (`pip install {gone[1]}`)", 0.0, versions, None
    if progress:
        progress(peer.name)
    start = time.perf_counter()
    results = run_peer(peer, max_examples)
    return peer, results, time.perf_counter() - start, versions, None


def write_report(run_: Run, folder: Path, max_examples: int) -> Path:
    """``folder/peer-NAME.json``: the run's conformance report with what the page needs."""
    peer, results, seconds, versions, _ = run_
    assert not isinstance(results, str), results
    options = {"command": "peers", "peer": peer.name, "max_examples": max_examples,
               "dtypes": list(DTYPES), "seconds": round(seconds, 3), "versions": versions,
               "inputs_sha256": inputs_hash()}
    path = Path(folder) / REPORT.format(peer.name.removeprefix("peer:"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document(results, options), indent=2, default=str) + "\n",
                    encoding="utf-8")
    return path


def _result(entry: dict[str, Any]) -> Result:
    details = dict(entry.get("details") or {})
    details.update({k: entry[k] for k in LIFTED if k in entry})
    details["diagnosis"] = entry.get("diagnosis")
    check = Check(entry["backend"], entry["device"], entry["dtype"], entry["mode"],
                  entry["encoding"], entry["kind"], entry["name"])
    return Result(check, entry["status"], entry.get("message") or "", details,
                  float(entry.get("seconds") or 0.0), entry.get("grade"),
                  entry.get("provided_by"))


def read_report(path: Path, max_examples: int) -> Run:
    """A peer's run from its report, refused when it is not one of the current inputs and
    settings (another inputs hash, example count or dtypes)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        options = data["options"]
        peer = _peer(options["peer"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PosencError(f"{path}: not a report of `posenc peers --reports`: {exc}") from exc
    stale = {"inputs_sha256": inputs_hash(), "max_examples": max_examples,
             "dtypes": list(DTYPES)}
    for key, want in stale.items():
        if options.get(key) != want:
            raise PosencError(f"{path}: made with {key} {options.get(key)!r}, not this page's "
                              f"{want!r}: run its group again (nox -s GROUP)")
    results = [_result(entry) for entry in data["results"]]
    return peer, results, float(options["seconds"]), dict(options["versions"]), Path(path).name


def generate(names: Iterable[str] | None = None, max_examples: int = MAX_EXAMPLES,
             progress: Callable[[str], None] | None = None,
             reports: Path | None = None) -> str:
    """The page: each peer from its report in ``reports`` when there is one, else run here."""
    runs: dict[str, Run] = {}
    for name in names or peer_names():
        found = None if reports is None else Path(reports) / REPORT.format(
            name.removeprefix("peer:"))
        if found is not None and found.exists():
            runs[name] = read_report(found, max_examples)
        else:
            runs[name] = run_here(_peer(name), max_examples, progress)
    return markdown(runs, max_examples=max_examples, digest=inputs_hash())


def recorded_hash(text: str) -> str | None:
    prefix, suffix = HASH_LINE.split("{}")
    for line in text.splitlines():
        if line.startswith(prefix) and line.endswith(suffix):
            return line[len(prefix): -len(suffix)]
    return None


def check(path: Path) -> str | None:
    """Why ``path`` is stale, or None when it was generated from the current inputs."""
    if not path.exists():
        return f"{path} is missing"
    if recorded_hash(path.read_text(encoding="utf-8")) != inputs_hash():
        return f"{path} was generated from other adapters, harness code or specs"
    return None


def freshness_exit(problem: str | None, path: Path) -> int:
    """What ``--check`` of a generated page prints and returns: 1 when it is stale."""
    print(problem or f"{path} is up to date")
    return 1 if problem else 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="docs", metavar="DIR", help="output folder")
    parser.add_argument("--peer", action="append", metavar="NAME",
                        help="run only this peer (repeatable; default: every peer)")
    parser.add_argument("--max-examples", type=int, default=MAX_EXAMPLES,
                        help=f"Hypothesis examples per property (default {MAX_EXAMPLES})")
    parser.add_argument("--check", action="store_true",
                        help="run nothing; fail when docs/peers.md is stale")
    parser.add_argument("--reports", metavar="DIR", help="write each peer's run to "
                        "DIR/peer-NAME.json instead of the page (nox groups do)")
    parser.add_argument("--from-reports", metavar="DIR", help="write the page taking each "
                        "peer's run from DIR/peer-NAME.json where there is one")


def main_args(args: argparse.Namespace) -> int:
    path = Path(args.out) / MARKDOWN
    if args.check:
        return freshness_exit(check(path), path)
    # Keras reads its backend once, at import: this process picks torch unless told otherwise
    os.environ.setdefault("KERAS_BACKEND", "torch")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    names = [n if n.startswith("peer:") else f"peer:{n}" for n in args.peer or []] or None

    def progress(name: str) -> None:
        print(f"running {name} ...", file=sys.stderr, flush=True)

    if getattr(args, "reports", None):
        for name in names or peer_names():
            run_ = run_here(_peer(name), args.max_examples, progress)
            if isinstance(run_[1], str):
                print(f"{name}: {run_[1]}", file=sys.stderr)
                continue
            print(f"wrote {write_report(run_, Path(args.reports), args.max_examples)}")
        return 0
    text = generate(names, args.max_examples, progress,
                    getattr(args, "from_reports", None) and Path(args.from_reports))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m posenc.conformance.reports.scoreboard")
    add_arguments(parser)
    raise SystemExit(main_args(parser.parse_args()))
