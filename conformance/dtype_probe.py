"""Which dtypes to check a function in: each is tried on the function's smallest golden cases
in scope, under the framework settings its checks run under. ``posenc check`` and
:func:`posenc.conformance.check` both choose here, so they choose alike."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

_FLOAT64_ONLY_ERROR = (1e-9, 1e-3)  # a float64 result this far off (relative): float32 inside


def _call_case(backend: Any, spec: Any, case: Any, dtype: str, device: str) -> Any:
    """The override's result on a golden case, its inputs converted as the harness does."""
    arrays = {}
    for decl in spec.inputs:
        value = case.inputs.get(decl.name)
        if value is None:
            continue
        if decl.kind == "float":
            arrays[decl.name] = backend.from_numpy(np.asarray(value, np.float64), dtype, device)
        elif decl.kind == "bool":
            arrays[decl.name] = backend.from_numpy(np.asarray(value, bool), "bool", device)
        else:
            arrays[decl.name] = backend.from_numpy(np.asarray(value, np.int64),
                                                   backend.index_dtype, device)
    result = backend.overrides[spec.function](**arrays, **case.params)
    return result[0] if isinstance(result, tuple | list) else result


def _try(backend: Any, spec: Any, cases: Sequence[Any], dtype: str, device: str
         ) -> tuple[tuple[Any, Any] | None, str]:
    """(case, result) of the first case in scope, or None; and why the dtype is refused ("":
    not refused: nothing ran in scope, or posenc's checks will report what went wrong)."""
    from posenc.backends import adapters

    for case in cases:
        try:
            return (case, _call_case(backend, spec, case, dtype, device)), ""
        except NotImplementedError:
            continue
        except adapters.AdapterOutputError as exc:  # posenc's complaint, not a refusal:
            wrong = re.search(r"dtype (\w+), expected float64", str(exc))
            if dtype == "float64" and wrong:  # float32 by design: not held to float64
                return None, f"returns {wrong[1]} for float64 inputs"
            return None, ""  # the checks report it
        except Exception as exc:  # refused: this dtype is left out, with the reason
            return None, f"raises {type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
    return None, ""


def _float32_inside(backend: Any, case: Any, result: Any) -> str:
    """Why a float64 result shows float32 arithmetic ("": it does not)."""
    from posenc import array_api

    got = getattr(result, "dtype", None)
    if got is not None and array_api.dtype_name(got) != "float64":
        return f"it returns {array_api.dtype_name(got)} for float64 inputs"
    actual = np.asarray(backend.to_numpy(result), np.float64)
    expected = np.asarray(case.output, np.float64)
    if actual.shape == expected.shape and expected.size:
        scale = float(np.max(np.abs(expected))) or 1.0
        error = float(np.max(np.abs(actual - expected)))
        low, high = _FLOAT64_ONLY_ERROR
        if low * scale < error <= high * scale:
            return (f"it computes in float32 (error {error:.1e} on values up to {scale:.3g}, "
                    f"case {case.name!r})")
    return ""


def probe_dtypes(backend: Any, encoding: str, device: str = "cpu",
                 settings: Mapping[str, str] | None = None, hint: str = "--dtype"
                 ) -> tuple[list[str] | None, str]:
    """The dtypes to check a function in, by trying it on its smallest golden cases in scope
    (each under ``backend.settings``, as its checks run), and the plan line saying what was
    chosen and why. A dtype it refuses (raises on) is left out; float64 is left out where the
    function computes in float32 (its float64 result within float32 rounding of the golden,
    or returned in another dtype); a float64 result further off keeps float64, for the checks
    to judge. None: nothing to probe (no float input). ``hint``: how a user asks for a dtype
    anyway (the CLI's ``--dtype``, the API's ``dtypes=``)."""
    from posenc import golden
    from posenc.catalog import specs

    spec = specs()[encoding]
    if spec.function not in backend.overrides or not spec.inputs:
        return None, ""
    if not any(i.kind == "float" for i in spec.inputs):
        if spec.output_kind != "int" or not backend.dtypes:
            return None, ""
        return [backend.dtypes[0]], (f"plan: dtype {backend.dtypes[0]} only ({encoding} takes "
                                     "and returns integers: other dtypes repeat the same checks)")
    cases = sorted((c for c in golden.load(spec).cases.values()
                    if not (backend.scope and backend.scope(spec.function, dict(c.params)))),
                   key=lambda c: sum(np.size(v) for v in c.inputs.values() if v is not None))[:3]
    if not cases:
        return None, ""
    chosen, left_out = [], []
    for dtype in backend.dtypes:
        with backend.settings(dtype, False, dict(settings or {})):
            outcome, refusal = _try(backend, spec, cases, dtype, device)
            why = _float32_inside(backend, *outcome) if outcome and dtype == "float64" else ""
        if refusal:
            left_out.append(f"{dtype}: it {refusal}")
        elif why:
            left_out.append(f"float64: {why}")
        else:
            chosen.append(dtype)
    line = f"plan: dtypes {', '.join(chosen) or 'none'}"
    line += f" (probed on {len(cases)} of {encoding}'s smallest golden cases in scope"
    if left_out:
        line += "; left out: " + "; ".join(left_out) + f"; {hint} checks one anyway"
    return chosen, line + ")"


def choose(backend: Any, encodings: Sequence[str], device: str = "cpu",
           settings: Mapping[str, str] | None = None, hint: str = "--dtype") -> tuple[Any, str]:
    """``backend`` restricted to the dtypes its functions compute in (several encodings: the
    dtypes any of them takes), and the plan lines saying which and why."""
    chosen: list[str] = []
    lines = []
    for encoding in encodings:
        picked, line = probe_dtypes(backend, encoding, device, settings, hint)
        if picked is None:
            continue
        chosen += [d for d in picked if d not in chosen]
        if line:
            lines.append(line)
    if not lines:
        return backend, ""
    if not chosen:  # refused everywhere: checked anyway, so the checks say how it fails
        return backend, "\n".join(lines)
    dtypes = tuple(d for d in backend.dtypes if d in chosen)
    return dataclasses.replace(backend, dtypes=dtypes), "\n".join(lines)
