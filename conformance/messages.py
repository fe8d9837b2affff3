"""Failure messages a user can act on: the case's parameters and input shapes, plain numbers,
the frame that raised, and no Hypothesis explanation pointing into the harness itself."""

from __future__ import annotations

import re
import traceback
from pathlib import Path
from typing import Any

import numpy as np

HARNESS = Path(__file__).resolve().parent  # conformance/ (properties/ included)
_NUMPY_SCALAR = re.compile(r"np\.(?:float|int|uint)\d+\(([^()]*)\)")
_PATH = re.compile(r"(/[^\s:'\"]+\.py)")


def number(value: Any) -> str:
    """A scalar as a user writes it: 28, not np.float64(28.0); 0.5, not np.float32(0.5)."""
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        v = float(value)
        return str(int(v)) if v.is_integer() and abs(v) < 2**53 else repr(v)
    return repr(value)


def plain(text: str) -> str:
    """``text`` with NumPy scalar reprs (np.float64(28.0)) written as plain numbers."""
    return _NUMPY_SCALAR.sub(lambda m: number(float(m.group(1)))
                             if _is_float(m.group(1)) else m.group(1), text)


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _in_harness(line: str) -> bool:
    return any(Path(p).resolve().is_relative_to(HARNESS) for p in _PATH.findall(line))


def notes(exc: BaseException) -> list[str]:
    """The exception's notes (Hypothesis's failing example and explanation), without the
    explanation lines that point into the harness's own files; an explanation left without
    a line of its own is dropped whole."""
    lines = [line for note in getattr(exc, "__notes__", []) for line in str(note).splitlines()
             if line.strip()]
    out: list[str] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("Explanation"):
            out.append(lines[i])
            i += 1
            continue
        block = [lines[i]]  # the explanation: its header and the indented lines under it
        i += 1
        while i < len(lines) and lines[i].startswith((" ", "\t")):
            block.append(lines[i])
            i += 1
        kept = [line for line in block if not _in_harness(line)]
        if any(".py:" in line for line in kept):
            out += kept
    return [plain(line) for line in out]


def last_frame(exc: BaseException) -> str:
    """Where ``exc`` was raised: 'file:line in function' of the last traceback frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    frame = frames[-1]
    return f"{frame.filename}:{frame.lineno} in {frame.name}"


def inputs(arrays: dict[str, Any], dtypes: dict[str, str]) -> dict[str, dict[str, Any]]:
    """name -> {"shape", "dtype"} of the arrays passed (dtype: what the backend received)."""
    return {k: {"shape": list(np.shape(v)), "dtype": dtypes.get(k, str(np.asarray(v).dtype))}
            for k, v in arrays.items() if v is not None}


def jsonable(value: Any) -> Any:
    """Parameters as JSON data: NumPy scalars and arrays become numbers and lists."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return repr(value)


def context_lines(params: dict[str, Any] | None, shapes: dict[str, dict[str, Any]] | None,
                  reason: str | None) -> list[str]:
    """The lines appended to a failure: parameters, inputs and the tolerance's reason."""
    lines = []
    if params is not None:
        shown = ", ".join(f"{k}={_short(v)}" for k, v in params.items()) or "(defaults)"
        lines.append(f"params: {shown}")
    if shapes:
        lines.append("inputs: " + ", ".join(
            f"{k} {v['dtype']}[{', '.join(str(n) for n in v['shape'])}]"
            for k, v in shapes.items()))
    if reason:
        lines.append(f"tolerance: {reason}")
    return lines


def _short(value: Any) -> str:
    text = number(value) if isinstance(value, int | float | np.generic) else repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def failure(result: Any, ctx: Any, exc: BaseException | None = None) -> Any:
    """``result`` (a fail or error) with the call's parameters and inputs recorded in its
    details and appended to its message, the frame that raised (errors) and the tolerance's
    reason (fails)."""
    lines = []
    if exc is not None and (where := last_frame(exc)):
        lines.append(f"raised at {where}")
    params = shapes = None
    if ctx is not None and ctx.last_call is not None:
        params, shapes = jsonable(ctx.last_call[0]), ctx.last_call[1]
        result.details.setdefault("params", params)
        result.details.setdefault("inputs", shapes)
        worst = result.details.get("worst_index")
        if worst is not None and ctx.last_shape is not None and len(worst) == len(ctx.last_shape):
            found = at_index(ctx.last_ints, ctx.last_shape, tuple(worst))
            if found:
                result.details["at_worst"] = found
                lines.append("at the worst index: " + ", ".join(
                    f"{k}={v}" for k, v in found.items()))
    reason = ctx.tol.reason if ctx is not None and result.status == "fail" else None
    lines += context_lines(params, shapes, reason)
    result.message = "\n".join([result.message, *lines])
    return result


def at_index(ints: dict[str, Any], out_shape: tuple[int, ...],
             index: tuple[int, ...]) -> dict[str, int]:
    """The integer inputs (positions, relative distances) that produced element ``index`` of a
    result of ``out_shape``, where the input's axes line up with the result's: all of them
    (relative positions -> a bias), all but the feature axis ([..., seq] -> [..., seq, dim]),
    the sequence axis ([seq] -> [..., seq, dim]), or batch and sequence ([batch, seq] ->
    [batch, ..., seq, dim])."""
    found = {}
    for name, a in ints.items():
        a = np.asarray(a)
        if a.ndim == 0 or a.ndim > len(out_shape):
            continue
        if a.shape == out_shape or (a.ndim == len(out_shape) - 1
                                    and a.shape == out_shape[:-1]):
            at = index[: a.ndim]
        elif a.ndim == 1 and len(out_shape) >= 2 and a.shape[0] == out_shape[-2]:
            at = (index[-2],)
        elif (a.ndim == 2 and len(out_shape) >= 3
              and a.shape == (out_shape[0], out_shape[-2])):
            at = (index[0], index[-2])
        else:
            continue
        found[name] = int(a[at])
    return found
