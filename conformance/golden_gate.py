"""The golden gate: a golden is verified before any backend is judged against it.

A broken golden must be blamed on the golden, never on the backend under test. For each spec
the gate checks what ``posenc golden check`` checks (the file's sha256, freshness against the
spec and the reference, the arrays each case needs, the stored numbers against an in-memory
regeneration) and sorts every problem into the case it spoils. The cases of a spec stay
independent: a case with a problem becomes a golden error naming the file, the case and the
array, and the other cases are judged as usual. A spec edited without a regen only spoils the
cases whose regeneration differs; the others are judged and the staleness is a warning.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posenc import golden
from posenc.errors import GoldenError, PosencError
from posenc.paths import golden_dir
from posenc.specs import Spec


@dataclass(frozen=True)
class GoldenProblem:
    spec_id: str
    file: str
    case: str | None  # None: the whole file is unusable
    array: str | None
    reason: str

    def __str__(self) -> str:
        where = [self.file]
        if self.case is not None:
            where.append(f"case {self.case!r}")
        if self.array is not None:
            where.append(f"array {self.array!r}")
        return (f"golden error: {': '.join(where)}: {self.reason} "
                f"(run `posenc golden regen {self.spec_id}`; the backend was not judged)")


class GoldenCaseError(PosencError):
    """A case whose golden is unusable; the result is an error that blames the golden."""

    def __init__(self, problems: list[GoldenProblem]) -> None:
        super().__init__("\n".join(map(str, problems)))
        self.problems = problems

    @property
    def details(self) -> dict[str, Any]:
        return {"blame": "golden", "golden_problems": [str(p) for p in self.problems]}


@dataclass
class VerifiedGolden:
    """The usable cases of one spec's golden, and the problems of the others."""

    spec: Spec
    golden: golden.Golden
    problems: dict[str | None, list[GoldenProblem]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def cases(self) -> dict[str, golden.GoldenCase]:
        """The usable cases, by name."""
        return self.golden.cases

    def case(self, name: str) -> golden.GoldenCase:
        found = self.problems.get(None, []) + self.problems.get(name, [])
        if found:
            raise GoldenCaseError(found)
        return self.golden.cases[name]

    def notes(self) -> dict[str, Any]:
        """What a case's result carries about its golden besides pass or fail."""
        return {"golden_warnings": list(self.warnings)} if self.warnings else {}


def _expected_arrays(spec: Spec, case_name: str) -> dict[str, str]:
    """Array name -> why the case needs it (its output, and each input the case declares)."""
    case = spec.case(case_name)
    out = {f"{case_name}/out": "the reference output"}
    for decl in spec.inputs:
        if case.inputs.get(decl.name) is not None:
            kind = "optional input" if decl.optional else "required input"
            out[f"{case_name}/in/{decl.name}"] = f"{kind} {decl.name!r}"
    return out


def verify(spec: Spec, directory: Path | None = None) -> VerifiedGolden:
    """Check ``spec``'s golden and sort its problems by case (never raises for a bad golden)."""
    directory = directory or golden_dir()
    result = VerifiedGolden(spec, golden.Golden(spec))
    file = str(directory / f"{spec.id}.npz")

    def whole(reason: str) -> VerifiedGolden:
        result.problems[None] = [GoldenProblem(spec.id, file, None, None, reason)]
        return result

    try:
        entry = golden.read_manifest(directory)["encodings"].get(spec.id)
    except GoldenError as exc:
        return whole(str(exc))
    if entry is None:
        return whole(f"no entry for {spec.id!r} in {directory / golden.MANIFEST}")
    file = str(directory / entry["file"])
    try:
        arrays = golden.read_npz(directory / entry["file"], entry["sha256"])
    except GoldenError as exc:
        return whole(str(exc))

    stale = []
    hashes = (spec.content_hash(), golden.reference_hash(spec))
    if entry.get("spec_hash") != hashes[0]:
        stale.append("the spec changed since the golden was made")
    if entry.get("reference_hash") != hashes[1]:
        stale.append("the reference (or the input generators) changed since it was made")
    expected_names: set[str] = set()
    for case in spec.cases:
        problems = result.problems.setdefault(case.name, [])
        needed = _expected_arrays(spec, case.name)
        expected_names |= set(needed)
        missing = [(name, why) for name, why in needed.items() if name not in arrays]
        meta = entry.get("cases", {}).get(case.name)
        for name, why in missing:
            problems.append(GoldenProblem(spec.id, file, case.name, name,
                                          f"missing ({why})" + (f"; {'; '.join(stale)}"
                                                                if stale else "")))
        if meta is None and not missing:
            problems.append(GoldenProblem(spec.id, file, case.name, None,
                                          "the manifest has no entry for this case"))
        if problems:
            continue
        prefix = f"{case.name}/in/"
        ins = {d.name: arrays.get(prefix + d.name) if prefix + d.name in needed else None
               for d in spec.inputs}
        stored = golden.GoldenCase(case.name, dict(case.params), ins,
                                   arrays[f"{case.name}/out"], meta.get("angle_bound", 0.0))
        problems += _against_regeneration(spec, file, stored, stale, hashes)
        if not problems:
            result.golden.cases[case.name] = stored
    extra = sorted(n for n in arrays
                   if n not in expected_names and n.split("/")[0] in result.problems)
    for name in extra:
        case_name = name.split("/")[0]
        result.problems[case_name].append(GoldenProblem(
            spec.id, file, case_name, name, "holds an input the spec's case does not declare"))
        result.golden.cases.pop(case_name, None)
    result.problems = {k: v for k, v in result.problems.items() if v}
    if stale:
        spoilt = len(result.problems)
        result.warnings.append(
            f"golden warning: {file} is stale ({'; '.join(stale)}): {spoilt} case(s) differ "
            f"from a regeneration and were not judged, the others were (run "
            f"`posenc golden regen {spec.id}`)")
    return result


# Each case's regeneration by (spec content hash, reference source hash, case name): the same
# for every Runner of a process, and most of what verifying a golden costs. Only compared,
# never judged against, so no caller can change one.
_REGENERATED: dict[tuple[str, str, str], golden.GoldenCase] = {}


def _regenerated(spec: Spec, name: str, hashes: tuple[str, str]) -> golden.GoldenCase:
    key = (*hashes, name)
    if key not in _REGENERATED:
        _REGENERATED[key] = golden.compute_case(spec, spec.case(name))
    return _REGENERATED[key]


def _against_regeneration(spec: Spec, file: str, stored: golden.GoldenCase,
                          stale: list[str], hashes: tuple[str, str]) -> list[GoldenProblem]:
    """The stored case against the reference run in memory: a hand-edited number whose sha256
    was recomputed, or a spec edited without a regen, shows up here. ``hashes``: the spec's
    content hash and its reference's, as :func:`verify` computed them."""
    try:
        fresh = _regenerated(spec, stored.name, hashes)
    except PosencError as exc:
        return [GoldenProblem(spec.id, file, stored.name, None, f"cannot regenerate: {exc}")]
    why = "; ".join(stale) if stale else "drifted: edited after it was generated"
    out = []
    pairs = [(f"{stored.name}/out", stored.output, fresh.output),
             *((f"{stored.name}/in/{k}", stored.inputs[k], v) for k, v in fresh.inputs.items())]
    for name, old, new in pairs:
        diff = golden.compare_arrays(name, old, new)
        if diff:
            out.append(GoldenProblem(spec.id, file, stored.name, name,
                                     f"{diff.removeprefix(name + ': ')} ({why})"))
    if abs(stored.angle_bound - fresh.angle_bound) > 1e-9 * max(1.0, fresh.angle_bound):
        out.append(GoldenProblem(spec.id, file, stored.name, None,
                                 f"angle_bound {stored.angle_bound} != regenerated "
                                 f"{fresh.angle_bound} ({why})"))
    return out


def summary(results: Iterable[Any]) -> str:
    """Each golden problem once (however many checks it spoilt), then the staleness warnings."""
    problems: dict[str, int] = {}
    warnings: dict[str, None] = {}
    for r in results:
        for text in r.details.get("golden_problems", []):
            problems[text] = problems.get(text, 0) + 1
        warnings.update(dict.fromkeys(r.details.get("golden_warnings", [])))
    return "\n".join([*(f"{t} [{n} check(s)]" for t, n in problems.items()), *warnings])
