"""Whose limit a failing check shows: the implementation's bug; a limit of posenc's adapter or
of the inputs posenc feeds it (cos/sin posenc supplies in q's dtype, a layout conversion, the
integer dtype the framework holds); the framework's bug (a control with no code under test
fails, conformance/flex.py); or posenc's golden. Each fail, error and xfail records
``details["whose"]`` and says it in a ``whose:`` line, so no message blames the implementation
for posenc's own limit."""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import posenc
from posenc.backends import adapter_base

IMPLEMENTATION, POSENC, FRAMEWORK, GOLDEN = "implementation", "posenc", "framework", "golden"
_HARNESS = Path(__file__).resolve().parent
_POSENC = (Path(posenc.__file__).resolve().parent, Path(adapter_base.__file__).resolve().parent,
           _HARNESS)
_HARNESS_CALLERS = ("hypothesis",)  # frames between the harness and the code it calls

WORDING = {
    IMPLEMENTATION: "whose: the implementation's ({why})",
    POSENC: "whose: posenc's, not the implementation's ({why})",
    FRAMEWORK: "whose: the framework's, not the implementation's ({why})",
    GOLDEN: "whose: posenc's golden, not the implementation's ({why})",
}


def _posenc_file(name: str) -> bool:
    path = Path(name).resolve()
    return any(path.is_relative_to(root) for root in _POSENC)


def of_error(exc: BaseException) -> tuple[str, str]:
    """Whose an exception raised while checking third-party code is: posenc's when every frame
    below the harness's last call is posenc's own (its adapter or a conversion raised before
    or after the implementation ran), else the implementation's (it raised, or its framework
    did on what it asked)."""
    frames = traceback.extract_tb(exc.__traceback__)
    last_harness = max((i for i, f in enumerate(frames)
                        if Path(f.filename).resolve().is_relative_to(_HARNESS)), default=-1)
    below = [f for f in frames[last_harness + 1:]
             if not any(part in f.filename for part in _HARNESS_CALLERS)]
    if isinstance(exc, adapter_base.AdapterOutputError):
        return IMPLEMENTATION, "posenc's adapter rejected what it returned"
    if not below:
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "the harness"
        return POSENC, f"raised in posenc's harness at {where}, not in the code under test"
    if all(_posenc_file(f.filename) for f in below):
        last = below[-1]
        return POSENC, (f"raised in posenc's adapter at {Path(last.filename).name}:{last.lineno} "
                        "in " + last.name + ", outside the implementation")
    return IMPLEMENTATION, "raised while it ran"


def record(result: Any, whose: str, why: str) -> Any:
    """``result`` with ``details["whose"]`` set and the ``whose:`` line added to its message
    (after its first line, where every report shows it)."""
    result.details["whose"] = whose
    line = WORDING[whose].format(why=why)
    head, sep, rest = result.message.partition("\n")
    result.message = f"{head}\n{line}{sep}{rest}" if sep else f"{head}\n{line}"
    return result


def of_failure(details: dict[str, Any]) -> tuple[str, str]:
    """Whose a failing comparison is: posenc's where the diagnosis it matches is one the
    adapter's inputs explain (``diagnosis["whose"]``), else the implementation's output."""
    diagnosis = details.get("diagnosis") or {}
    if diagnosis.get("whose"):
        return POSENC, diagnosis["whose"]
    if details.get("pairing"):
        return IMPLEMENTATION, ("its output, compared after posenc's layout conversion, an "
                                "exact permutation")
    return IMPLEMENTATION, "its output disagrees with the golden or the property"
