"""Transforms of ``rope`` for the bugs engines make at long positions: a cos/sin cache of N rows
clamped or zero past its end, positions wrapped (int16, or modulo a length), and a dynamic
scale computed for the call's length.

The cache's N and the wrap's length are *fitted* to the output under test: each row's rotation
angle is read pair by pair (``angle((y_a + i y_b) / (x_a + i x_b))``) and the position it
rotates by is recovered from the slowest frequency up to the fastest (each pair narrows the
estimate of the one before, as an unwrapped phase does). A clamped cache freezes at one row,
N - 1, for every position from N on; a wrapped one repeats with period L.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..rotary.schedules import kind
from .base import Arrays, Reference, Transform, call, positions, register, rotary_call, rows_of

MAX_CANDIDATES = 20000  # starting guesses per row for the slowest frequency (else: no fit)
ZERO = 1e-3  # a rotated pair this small against x's reads as a zero cos/sin row
INT16 = 2**15


def _same_schedule(inputs: Arrays, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with the length a dynamic or LongRoPE schedule scales for made explicit, so
    that changing the positions does not change the frequencies."""
    if params["seq_len"] is not None or kind(params["scaling"]) not in ("dynamic", "longrope"):
        return params
    x, pos = np.asarray(inputs["x"]), positions(inputs)
    return {**params, "seq_len": x.shape[-2] if inputs.get("positions") is None
            else int(pos.max()) + 1}


def _with_positions(ref: Reference, inputs: Arrays, params: dict[str, Any], pos: Any) -> Any:
    return call(ref, {**inputs, "positions": np.asarray(pos, np.int64)},
                _same_schedule(inputs, params))


def read_positions(inputs: Arrays, params: dict[str, Any], actual: np.ndarray
                   ) -> np.ndarray | None:
    """The integer position each row of ``actual`` is rotated by (rows shaped as x without
    its last axis), or None where it cannot be read (no frequency, too many guesses)."""
    x, pos, thetas, _, a, b = rotary_call(inputs, params)
    usable = thetas > 0
    if not usable.any() or actual.shape != x.shape:
        return None
    order = np.argsort(np.where(usable, thetas, np.inf))[: int(usable.sum())]
    thetas, a, b = thetas[order], a[order], b[order]
    ratio = (actual[..., a] + 1j * actual[..., b]) * np.conj(x[..., a] + 1j * x[..., b])
    phase = np.angle(ratio)  # [..., seq, pairs], slowest first
    weight = np.abs(ratio)
    ok = weight > 1e-6 * np.max(weight, axis=-1, keepdims=True, initial=0.0)
    limit = float(np.max(np.abs(pos), initial=0)) + 1
    step = np.pi / thetas[0]
    count = int(2 * limit / step) + 1
    if count > MAX_CANDIDATES:
        return None
    guess = (np.arange(count) - count // 2) * step  # [candidates]
    estimate = np.broadcast_to(guess, (*phase.shape[:-1], count)).copy()
    for j in range(len(thetas)):  # each pair narrows the last estimate (phase unwrapping)
        turns = np.round((estimate * thetas[j] - phase[..., j:j + 1]) / (2 * np.pi))
        refined = (phase[..., j:j + 1] + 2 * np.pi * turns) / thetas[j]
        estimate = np.where(ok[..., j:j + 1], refined, estimate)
    estimate = np.round(estimate)
    miss = np.abs(np.exp(1j * (phase[..., None, :] - estimate[..., None] * thetas)) - 1)
    score = np.sum(np.where(ok[..., None, :], weight[..., None, :] * miss, 0.0), axis=-1)
    best = np.take_along_axis(estimate, np.argmin(score, axis=-1)[..., None], -1)[..., 0]
    return best.astype(np.int64)


def _row_positions(inputs: Arrays) -> np.ndarray:
    """The true position of every row of x (x's shape without its last axis)."""
    x, pos = np.asarray(inputs["x"]), positions(inputs)
    return np.broadcast_to(rows_of(x, pos, pos), x.shape[:-1])


def _mostly(agree: np.ndarray) -> bool:
    """Nine rows in ten (or all of none) agree with a fit: a row or two may be read wrong where
    x's pairs are too small to show their angle."""
    return agree.size == 0 or float(np.mean(agree)) >= 0.9


def _moved_rows(inputs: Arrays, params: dict[str, Any], actual: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray] | None:
    """The position each row reads and which rows read another than their own (None: it
    cannot be read, or every row reads its own)."""
    read = read_positions(inputs, params, actual)
    if read is None:
        return None
    moved = read != _row_positions(inputs)
    return (read, moved) if moved.any() else None


def _fit_clamp(inputs: Arrays, params: dict[str, Any], actual: np.ndarray | None
               ) -> dict[str, Any] | None:
    true = _row_positions(inputs)
    if actual is None:  # planted: a cache ending after the lower half of the case's positions
        distinct = np.unique(true[true >= 0])
        return _rows(int(distinct[(len(distinct) - 1) // 2]) + 1) if distinct.size > 1 else None
    if (seen := _moved_rows(inputs, params, actual)) is None:
        return None
    read, moved = seen
    last = int(np.bincount(read[moved] - read[moved].min()).argmax() + read[moved].min())
    frozen = true > last
    if not (_mostly(read[frozen] == last) and _mostly(read[~frozen] == true[~frozen])):
        return None
    return _rows(last + 1)


def _rows(rows: int) -> dict[str, Any]:
    return {"rows": rows, "last": rows - 1}


def _fit_zero(inputs: Arrays, params: dict[str, Any], actual: np.ndarray | None
              ) -> dict[str, Any] | None:
    true = _row_positions(inputs)
    if actual is None:
        distinct = np.unique(true[true > 0])
        return _zero_from(int(distinct[len(distinct) // 2]), true) if distinct.size else None
    x, _, thetas, _, a, b = rotary_call(inputs, params)
    rotated = np.concatenate([a[thetas > 0], b[thetas > 0]])
    if not rotated.size or actual.shape != x.shape:
        return None
    size = np.linalg.norm(x[..., rotated], axis=-1)
    zero = (np.linalg.norm(actual[..., rotated], axis=-1) <= ZERO * size) & (size > 0)
    if not zero.any():
        return None
    first = int(true[zero].min())
    if not _mostly(zero[true >= first]) or zero[true < first].any():
        return None
    return _zero_from(first, true)


def _zero_from(first: int, true: np.ndarray) -> dict[str, Any]:
    """The cache's size as far as the case shows it: between the last row seen right and the
    first zero one."""
    below = true[true < first]
    seen = int(below.max()) + 1 if below.size else 0
    cache = (f"{first} rows" if seen == first else f"{seen} to {first} rows" if seen
             else f"at most {first} rows")
    return {"rows": first, "cache": cache}


def _fit_modulo(inputs: Arrays, params: dict[str, Any], actual: np.ndarray | None
                ) -> dict[str, Any] | None:
    true = _row_positions(inputs)
    if actual is None:
        top = int(np.max(true, initial=0))
        return {"length": top // 2 + 1} if top > 1 else None
    if (seen := _moved_rows(inputs, params, actual)) is None:
        return None
    read, moved = seen
    length = int(np.gcd.reduce(np.abs(true[moved] - read[moved])))  # whole periods apart
    if length <= 1 or not _mostly(np.mod(true, length) == read):
        return None
    return {"length": length}


def _clamped(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    rows = params.pop("rows")
    params.pop("last", None)
    return _with_positions(ref, inputs, params, np.minimum(positions(inputs), rows - 1))


def _zero_rows(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    rows = params.pop("rows")
    params.pop("cache", None)
    x, pos, thetas, _, a, b = rotary_call(inputs, params)
    out = np.array(call(ref, inputs, params), dtype=np.float64)
    past = np.broadcast_to(rows_of(x, pos, pos), x.shape[:-1]) >= rows
    rotated = np.concatenate([a[thetas > 0], b[thetas > 0]])
    out[..., rotated] = np.where(past[..., None], 0.0, out[..., rotated])
    return out


def _modulo(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    length = params.pop("length")
    return _with_positions(ref, inputs, params, np.mod(positions(inputs), length))


def _int16(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    wrapped = np.mod(positions(inputs) + INT16, 2 * INT16) - INT16
    return _with_positions(ref, inputs, params, wrapped)


def _call_length(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    """Dynamic NTK (or LongRoPE's switch) evaluated for the call's own length, x's seq."""
    if kind(params["scaling"]) not in ("dynamic", "longrope"):
        return call(ref, inputs, params)
    return call(ref, inputs, {**params, "seq_len": np.asarray(inputs["x"]).shape[-2]})


register(
    cache_clamped=Transform("positions from {rows} on read row {last} of the cos/sin cache",
                            _clamped, inputs=("x", "positions"), modules=("rope",),
                            fit=_fit_clamp),
    cache_zero_past=Transform("cos/sin rows from position {rows} on are zeros", _zero_rows,
                              inputs=("x", "positions"), modules=("rope",), fit=_fit_zero),
    positions_modulo=Transform("positions modulo {length}", _modulo,
                               inputs=("x", "positions"), modules=("rope",), fit=_fit_modulo),
    positions_int16=Transform("positions wrapped to int16", _int16, inputs=("positions",),
                              modules=("rope",)),
    dynamic_for_call_length=Transform("seq_len = the call's length (x's seq)", _call_length,
                                      inputs=("x",), params=("scaling", "seq_len"),
                                      modules=("rope",)),
)
