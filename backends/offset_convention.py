"""Position conventions converted for an adapted function: positions given as an integer offset,
and xPos scales centred where the function chooses.

An *offset* function takes a start ``p0`` instead of a positions array and rotates (or scales)
positions ``p0 + arange(seq)``. The harness's positions reach it as ``offset=p0`` whenever they
are that contiguous run and the same in every batch row; any other positions (left padding,
ragged batches, shuffled, and negative starts unless declared legal) are out of its scope, with
a reason that names the convention. Positions that are no single run (shuffled, repeated, a
different run per batch row: left padding, ragged batches) reach it as one call per contiguous
run of each row, at most :data:`MAX_RUNS` calls, their results put back in place: rope and xPos
treat each token on its own, so this is the same computation, and the scope line says so.

An xPos function with its own *centre* ``c_t`` (torchscale ``(seq + offset + 1) // 2``,
rotary-embedding-torch ``seq // 2``) gives ``posenc``'s output at centre ``c`` once pair ``i`` is
multiplied by ``zeta_i ** (s (c_t - c) / scale_base)`` (``s = +1`` query, ``-1`` key): the spec's
factor is ``zeta_i ** (s (n - c) / scale_base)`` and logits do not depend on ``c``.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from posenc import array_api
from posenc.encodings.xpos import zeta
from posenc.errors import ParameterError, Unsupported

from .adapter_base import to_numpy

MAX_RUNS = 512  # calls one converted call may split into (one per token of a shuffled case)

CENTRES: dict[str, Callable[[int, int], float]] = {
    "torchscale": lambda seq, offset: float((seq + offset + 1) // 2),
    "rotary-embedding-torch": lambda seq, offset: float(seq // 2),
}


def start_of(positions: Any, seq: int, *, negative: bool, label: str) -> int:
    """``p0`` when ``positions`` are ``p0 + arange(seq)`` in every row (None: 0); else the call
    is out of scope (:class:`Unsupported`) with the reason."""
    if positions is None:
        return 0
    convention = f"{label} takes positions as an offset (p0 + arange(seq))"
    try:
        values = np.asarray(to_numpy(positions))
    except Exception as exc:  # traced (jit, compile): the start cannot be read on the host
        raise Unsupported(f"{convention}: traced positions cannot be read as an offset") from exc
    host = values.reshape(-1, values.shape[-1])
    if host.shape[-1] and not np.all(host == host[:1, :1] + np.arange(host.shape[-1])):
        kind = "ragged or padded batch rows" if host.shape[0] > 1 and np.all(
            np.diff(host, axis=-1) == 1) else "non-contiguous positions"
        raise Unsupported(f"{convention}: {kind} cannot be expressed")
    start = int(host[0, 0]) if host.size else 0
    if start < 0 and not negative:
        raise Unsupported(f"{convention}: a negative start ({start}) is not declared legal "
                          "(negative_offset=True declares it)")
    return start


def runs_of(positions: Any, x_shape: tuple[int, ...], *, negative: bool,
            label: str) -> list[tuple[int | None, int, int, int]]:
    """``(row, first, stop, p0)`` for each contiguous run ``p0 + arange(stop - first)`` of
    tokens ``first:stop`` of batch ``row`` (None: positions ``[seq]``, shared by every row)."""
    convention = f"{label} takes positions as an offset (p0 + arange(seq))"
    try:
        host = np.asarray(to_numpy(positions)).astype(np.int64)
    except Exception as exc:  # traced (jit, compile): the start cannot be read on the host
        raise Unsupported(f"{convention}: traced positions cannot be read as an offset") from exc
    if host.ndim == 2 and host.shape[0] == 1:  # one row shared by every batch row
        host = host[0]
    if host.ndim not in (1, 2) or (host.ndim == 2 and (len(x_shape) < 3 or
                                                       host.shape[0] != x_shape[0])):
        raise Unsupported(f"{convention}: positions of shape {list(host.shape)} cannot be "
                          "split into runs of x's rows")
    if host.size and host.min() < 0 and not negative:
        raise Unsupported(f"{convention}: a negative start ({int(host.min())}) is not declared "
                          "legal (negative_offset=True declares it)")
    rows = [(None, host)] if host.ndim == 1 else list(enumerate(host))
    runs = []
    for row, values in rows:
        breaks = [0, *(np.flatnonzero(np.diff(values) != 1) + 1).tolist(), len(values)]
        runs += [(row, a, b, int(values[a])) for a, b in itertools.pairwise(breaks) if b > a]
    if len(runs) > MAX_RUNS:
        raise Unsupported(f"{convention}: {len(runs)} contiguous runs, more calls than the "
                          f"{MAX_RUNS} a converted call may take")
    return runs


def takes_integer(fn: Callable[..., Any], name: str) -> bool:
    """Whether ``fn``'s parameter ``name`` takes an integer (an int default or annotation)."""
    try:
        parameter = inspect.signature(fn).parameters.get(name)
    except (TypeError, ValueError):
        return False
    if parameter is None:
        return False
    default, note = parameter.default, parameter.annotation
    return (isinstance(default, int) and not isinstance(default, bool)) or note in (int, "int")


def refuse_array_to_offset(fn: Callable[..., Any], names: dict[str, str], label: str) -> None:
    """A positions array mapped onto an integer parameter is a declaration error, not a column
    of ERRORs blamed on the function."""
    theirs = names.get("positions")
    if theirs is not None and takes_integer(fn, theirs):
        raise ParameterError(f"names={{'positions': {theirs!r}}}: {label}'s {theirs!r} takes an "
                             "integer start, not a positions array; declare the offset "
                             f"convention instead: offset={theirs!r} (CLI: --offset {theirs})")


def centre_of(declared: str | Callable[[int, int], float]) -> Callable[[int, int], float]:
    if callable(declared):
        return declared
    if declared not in CENTRES:
        raise ParameterError(f"centre={declared!r}: no such xPos centre convention (known: "
                             f"{', '.join(CENTRES)}, or a function (seq, offset) -> centre)")
    return CENTRES[declared]


def _representable(x: Any, params: dict[str, Any], spans: list[float], label: str) -> None:
    """Out of scope when the function's own factor (about its centre) or the conversion to
    posenc's centre leaves x's dtype: its output there carries no information to convert."""
    rd = int(params.get("rotary_dim") or x.shape[-1])
    worst = max(abs(s) for s in spans) / float(params["scale_base"]) * -np.log(zeta(rd)[0])
    name = str(x.dtype).rsplit(".", 1)[-1]
    limit = 0.5 * np.log(float(np.finfo(np.dtype(name) if name != "bfloat16" else np.float32).max))
    if worst > limit:
        raise Unsupported(f"{label}'s xPos centre convention: its factor about its own centre, "
                          f"or the conversion to posenc's, reaches exp({worst:.4g}), beyond half "
                          f"of {name}'s range")


def recentred(result: Any, x: Any, params: dict[str, Any], theirs: float,
              pairing: str) -> Any:
    """``result`` (scaled about ``theirs``) as scaled about ``params['centre']``."""
    dim = int(x.shape[-1])
    rd = int(params.get("rotary_dim") or dim)
    sign = 1.0 if params.get("kind", "query") == "query" else -1.0
    z = np.asarray(zeta(rd), np.float64)
    per_feature = np.repeat(z, 2) if pairing == "interleaved" else np.concatenate([z, z])
    power = sign * (theirs - float(params.get("centre", 0.0))) / float(params["scale_base"])
    factor = np.concatenate([per_feature ** power, np.ones(dim - rd)])
    xp = array_api.namespace(x=result)
    return result * array_api.asarray(xp, factor.tolist(), dtype=result.dtype,
                                      device=array_api.device_of(result))


def _by_runs(call: Callable[[Any, int], Any], x: Any,
             runs: list[tuple[int | None, int, int, int]]) -> Any:
    """The results of ``call(x's tokens of one run, p0)`` for every run, put back in place."""
    xp = array_api.namespace(x=x)
    rows: dict[int | None, list[Any]] = {}
    for row, first, stop, start in runs:
        piece = x[..., first:stop, :] if row is None else x[row:row + 1, ..., first:stop, :]
        rows.setdefault(row, []).append(call(piece, start))
    joined = [xp.concat(pieces, axis=-2) if len(pieces) > 1 else pieces[0]
              for pieces in rows.values()]
    return joined[0] if None in rows else xp.concat(joined, axis=0)


def offset_function(fn: Callable[..., Any], offset: str, names: dict[str, str],
                    defaults: dict[str, Any], *, centre: Any = None, pairing: str = "interleaved",
                    negative: bool = False, label: str) -> Callable[..., Any]:
    """``fn`` (taking an integer ``offset``) as a function of ``positions`` (and of ``centre``
    when its xPos centre is declared), under ``fn``'s other names."""
    own = inspect.signature(fn)
    if offset not in own.parameters:
        raise ParameterError(f"offset={offset!r}: {label} takes no {offset!r} "
                             f"(it takes {', '.join(own.parameters)})")
    x_name = names.get("x", "x")
    theirs_of = centre_of(centre) if centre is not None else None
    back = {theirs: ours for ours, theirs in names.items()}

    def one_run(kwargs: dict[str, Any], start: int, ours_centre: float) -> Any:
        x = kwargs[x_name]
        seq = int(x.shape[-2])
        params = {**defaults, **{back.get(k, k): v for k, v in kwargs.items()},
                  "centre": ours_centre}
        if theirs_of is None:
            return fn(**kwargs, **{offset: start})
        theirs = theirs_of(seq, start)
        _representable(x, params, [start - theirs, start + seq - 1 - theirs,
                                   theirs - float(ours_centre)], label)
        layout = params.get("layout") or pairing
        return recentred(fn(**kwargs, **{offset: start}), x, params, theirs, layout)

    def wrapper(**kwargs: Any) -> Any:
        positions = kwargs.pop("positions", None)
        ours_centre = kwargs.pop("centre", defaults.get("centre", 0.0))
        x = kwargs[x_name]
        try:
            start = start_of(positions, int(x.shape[-2]), negative=negative, label=label)
        except Unsupported as exc:
            if "traced" in str(exc):
                raise
            return _by_runs(lambda piece, p0: one_run({**kwargs, x_name: piece}, p0, ours_centre),
                            x, runs_of(positions, tuple(x.shape), negative=negative, label=label))
        return one_run(kwargs, start, ours_centre)

    added = [inspect.Parameter("positions", inspect.Parameter.KEYWORD_ONLY, default=None)]
    if theirs_of is not None:
        added.append(inspect.Parameter("centre", inspect.Parameter.KEYWORD_ONLY,
                                       default=defaults.get("centre", 0.0)))
    kept = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for n, p in own.parameters.items()
            if n != offset and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    wrapper.__signature__ = inspect.Signature(kept + added)  # type: ignore[attr-defined]
    wrapper.__name__ = getattr(fn, "__name__", label)
    return wrapper
