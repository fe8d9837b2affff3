"""Machinery shared by the rotary encodings: exact-position phases and the pair rotation.

A float32 angle ``m * theta`` is only known to ``eps32 * m * theta`` radians (6e-3 at
position 2^17), so the phases of float32 outputs are computed in turns instead, from exact
pieces. The frequency in turns per position, ``f = theta / 2 pi``, is split on the host into
float32 limbs ``a + b + c`` (``a`` and ``b`` 12 significant bits each) and the position into
``mh + ml + mf`` (``mh`` a multiple of 4096, ``|ml| <= 2048`` an integer, ``mf`` the
fraction of a float position). The products ``mh*a``, ``mh*b``, ``ml*a`` have at most 24
significant bits, so they are exact in float32, and so is their distance to the nearest
integer; only small, well-conditioned terms are rounded. The phase is reduced to
``[-1/2, 1/2]`` turn before it is scaled to radians: cos and sin are within ~4e-7 of the
float64 truth at every position float32 holds exactly (|m| <= 2^24).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from .. import array_api, native, params
from ..errors import ParameterError
from ..host_cache import host_cache

LAYOUTS = ("half", "interleaved")
_LIMB_BITS = 12
_POSITION_SPLIT = float(2**_LIMB_BITS)


def _round_to_bits(value: float, bits: int) -> float:
    mantissa, exponent = math.frexp(value)
    return math.ldexp(round(math.ldexp(mantissa, bits)), exponent - bits)


def turn_limbs(inv_freq: Sequence[float]) -> list[list[float]]:
    """``[3][n]`` limbs (``a``, ``b``: 12 significant bits; ``c``: the rest, to be rounded to
    float32) whose sum is ``inv_freq / (2 pi)`` to ~2^-48 relative. Plain Python floats: under
    torch.compile they fold into constants, where NumPy would be traced into the graph."""
    return [list(row) for row in _limbs(tuple(float(f) for f in inv_freq))]


@host_cache()
def _limbs(inv_freq: tuple[float, ...]) -> tuple[tuple[float, ...], ...]:
    turns = [float(f) / (2.0 * math.pi) for f in inv_freq]
    a = [_round_to_bits(t, _LIMB_BITS) for t in turns]
    b = [_round_to_bits(t - ta, _LIMB_BITS) for t, ta in zip(turns, a, strict=True)]
    c = [t - ta - tb for t, ta, tb in zip(turns, a, b, strict=True)]
    return tuple(a), tuple(b), tuple(c)



def phases(xp: ModuleType, positions: Any, inv_freq: Sequence[float], *, compute: Any,
           device: Any, integral: bool = False) -> Any:
    """Angles ``positions * inv_freq`` in radians, broadcast over the last axis.

    ``positions`` is a float array of dtype ``compute`` whose last axis is 1 or ``n``;
    ``inv_freq`` the host frequencies (``n`` Python floats, e.g. a schedule's tuple). For
    float64 the product is direct;
    for float32 the result is the angle reduced to ``[-pi, pi]``, computed in turns from exact
    pieces (see the module docstring). ``integral``: the positions are known to be whole
    numbers (cast from integers), so the fraction's terms, exactly zero, are skipped.
    """
    if compute == xp.float64:
        theta = _asarray(xp, [float(f) for f in inv_freq], compute, device)
        return positions * theta
    fast = native.of(positions)
    inv = inv_freq if type(inv_freq) is tuple else tuple(float(f) for f in inv_freq)
    angles = fast.rotary_phases(positions, inv, compute, device)
    if angles is not None:
        return angles
    limbs = fast.rotary_limbs(inv, compute, device)
    if limbs is None:  # a constant of a compiled graph; JAX/TF: a cached array could be a tracer
        limbs = _asarray(xp, turn_limbs(inv), compute, device)
    return limb_phases(xp, positions, limbs, integral=integral)


def limb_phases(xp: ModuleType, positions: Any, limbs: Any, *, integral: bool = False) -> Any:
    """:func:`phases` from the frequencies' limbs ``[3, n]`` (:func:`turn_limbs` as an array of
    the positions' float dtype)."""
    a, b, c = limbs[0, ...], limbs[1, ...], limbs[2, ...]
    whole = positions if integral else xp.round(positions)
    high = xp.round(whole / _POSITION_SPLIT) * _POSITION_SPLIT
    low = whole - high
    turns = _wrap(xp, _wrap(xp, high * a) + _wrap(xp, low * a))
    turns = _wrap(xp, turns + _wrap(xp, high * b))
    small = low * b + (high * c + low * c)
    if not integral:
        small = small + (positions - whole) * (a + b + c)
    return _wrap(xp, turns + small) * (2.0 * math.pi)


def _wrap(xp: ModuleType, turns: Any) -> Any:
    """Distance to the nearest integer: exact for float32 values."""
    return turns - xp.round(turns)


def _asarray(xp: ModuleType, value: Any, dtype: Any, device: Any) -> Any:
    if device is None:
        return xp.asarray(value, dtype=dtype)
    return xp.asarray(value, dtype=dtype, device=device)


def rotate(xp: ModuleType, head: Any, cos: Any, sin: Any, layout: str) -> Any:
    """Rotate the pairs of ``head`` (``[..., r]``, compute dtype) by angles with ``cos`` and
    ``sin`` of shape ``[..., r/2]`` broadcastable against it."""
    rotated = native.of(head).rotate(head, cos, sin, layout)
    if rotated is not None:
        return rotated
    r = int(head.shape[-1])
    if layout == "half":
        a, b = head[..., : r // 2], head[..., r // 2 :]
        # XLA fuses cos and sin into every consumer and recomputes them per element there; full-width
        # products read each table once (1.7-2.8x faster under jax.jit / tf.function on CPU).
        # Same roundings: a*cos + (-b)*sin is a*cos - b*sin.
        return (head * xp.concat([cos, cos], axis=-1)
                + xp.concat([-b, a], axis=-1) * xp.concat([sin, sin], axis=-1))
    pairs = xp.reshape(head, (*tuple(head.shape[:-1]), r // 2, 2))
    a, b = pairs[..., 0], pairs[..., 1]
    return xp.reshape(xp.stack([a * cos - b * sin, b * cos + a * sin], axis=-1),
                      (*tuple(head.shape[:-1]), r))


def widen(xp: ModuleType, half: Any, layout: str) -> Any:
    """Half-width ``[..., r/2]`` values (cos, sin or a frequency per pair) at full width
    ``[..., r]`` in the layout's feature order: ``(c, c)`` for half, ``c0 c0 c1 c1 ...`` for
    interleaved."""
    return _paired(xp, half, half, layout)


def signed_frequencies(inv_freq: Sequence[float], layout: str) -> tuple[float, ...]:
    """The frequencies at full rotary width, ``-f`` on each pair's first member and ``+f`` on
    its second, in the layout's feature order: cos is even and sin odd, so the cos and sin of
    ``p * signed`` are the full-width cos and the signed sin that
    ``x * cos + partner(x) * sin`` rotates by."""
    if layout == "half":
        return (*(-f for f in inv_freq), *inv_freq)
    return tuple(v for f in inv_freq for v in (-f, f))


def cos_sin_table(xp: ModuleType, inv_freq: Sequence[float], rows: int, *, layout: str,
                  attention_factor: float = 1.0, device: Any = None) -> Any:
    """The float32 table ``[rows, 2, r]`` of positions ``0 .. rows-1``: row ``p`` holds cos
    and the signed sin (``-sin`` on a pair's first member) at full rotary width in the
    layout's order, both times ``attention_factor``, from exact phases. One gather then
    serves q and k, and the rotation is ``x * cos + partner(x) * sin``."""
    compute = xp.float32
    positions = xp.arange(rows, device=device) if device is not None else xp.arange(rows)
    p = xp.expand_dims(xp.astype(positions, compute), axis=-1)
    cos, sin = cos_sin(xp, phases(xp, p, inv_freq, compute=compute, device=device),
                       attention_factor)
    return xp.stack([widen(xp, cos, layout), _paired(xp, -sin, sin, layout)], axis=1)


def schedule_tables(xp: ModuleType, schedule: Any, rows: int, *, layout: str,
                    device: Any = None) -> tuple[Any, Any]:
    """``(table, table_long)``: :func:`cos_sin_table` of a resolved frequency schedule, and of
    LongRoPE's long frequencies (None without a run-time switch)."""
    def table(inv_freq: Sequence[float]) -> Any:
        return cos_sin_table(xp, inv_freq, rows, layout=layout,
                             attention_factor=schedule.attention_factor, device=device)
    long = schedule.long_inv_freq
    return table(schedule.inv_freq), None if long is None else table(long)


def _paired(xp: ModuleType, first: Any, second: Any, layout: str) -> Any:
    """``[..., r]`` with ``first`` on each pair's first member and ``second`` on its second."""
    if layout == "half":
        return xp.concat([first, second], axis=-1)
    return xp.reshape(xp.stack([first, second], axis=-1),
                      (*tuple(first.shape[:-1]), 2 * int(first.shape[-1])))


def head_width(dim: int) -> int:
    """``x.shape[-1] = dim`` holds a pair of features to rotate."""
    if dim < 2:
        raise ParameterError(f"x.shape[-1]={dim} leaves no pair of features to rotate")
    return dim


def rotary_width(dim: int, rotary_dim: Any) -> int:
    """The number of rotated features: ``rotary_dim`` checked against ``x.shape[-1] = dim``."""
    if rotary_dim is None:
        head_width(dim)
        if dim % 2:
            raise ParameterError(
                f"x.shape[-1]={dim} is odd: rotary embedding rotates pairs of features; "
                "pass an even rotary_dim to rotate only part of them")
        return dim
    rd = params.integer("rotary_dim", rotary_dim, minimum=2)
    if rd % 2:
        raise ParameterError(f"rotary_dim={rd} must be even")
    if rd > dim:
        raise ParameterError(f"rotary_dim={rd} exceeds x.shape[-1]={dim}")
    return rd


def array_inputs(xp: ModuleType, x: Any, positions: Any) -> tuple[Any, Any]:
    """``(device, positions)``: ``x`` checked to be a floating array, ``positions`` (unless
    None) made an array of ``xp`` on the device of ``x``."""
    if not hasattr(x, "dtype"):
        raise ParameterError(f"x must be an array, got {type(x).__name__}")
    array_api.check_floating(xp, "x", x)
    device = array_api.device_of(x)
    if positions is not None and not hasattr(positions, "dtype"):
        positions = array_api.asarray(xp, positions, device=device)
    return device, positions


def check_shapes(x: Any, positions: Any) -> tuple[int, int]:
    """``(seq, dim)`` of ``x`` ``[..., seq, dim]`` with ``positions`` ``[seq]`` or
    ``[batch, seq]`` (or None). The head width is pinned with ``operator.index``: after
    torch.compile recompiles it would be symbolic, and host frequencies depend on it."""
    if x.ndim < 2:
        raise ParameterError(f"x must have shape [..., seq, dim], got shape {tuple(x.shape)}")
    seq, dim = operator.index(x.shape[-2]), operator.index(x.shape[-1])
    if positions is None:
        return seq, dim
    pshape = tuple(positions.shape)
    if positions.ndim == 1 and pshape[0] == seq:
        return seq, dim
    if positions.ndim == 2 and x.ndim >= 3 and pshape == (int(x.shape[0]), seq):
        return seq, dim
    raise ParameterError(
        f"positions has shape {pshape} but x has shape {tuple(x.shape)}: positions must be "
        f"[seq] = [{seq}] or [batch, seq] = [{x.shape[0]}, {seq}] (batched needs x.ndim >= 3)")


def scheduled_phases(xp: ModuleType, positions: Any, schedule: Any, *, compute: Any,
                     device: Any, all_positions: Any = None, integral: bool = False) -> Any:
    """:func:`phases` for a resolved frequency schedule: with LongRoPE's run-time switch, the
    long frequencies when ``max(all_positions) + 1 > switch_length`` (data, not a
    recompile; ``all_positions`` defaults to ``positions``)."""
    angles = phases(xp, positions, schedule.inv_freq, compute=compute, device=device,
                    integral=integral)
    if schedule.long_inv_freq is None:
        return angles
    long = phases(xp, positions, schedule.long_inv_freq, compute=compute, device=device,
                  integral=integral)
    top = xp.max(positions if all_positions is None else all_positions)
    return xp.where(top + 1 > schedule.switch_length, long, angles)


def apply(xp: ModuleType, x: Any, angles: Any, *, rotary_dim: int, layout: str,
          factor: float = 1.0) -> Any:
    """Rotate the first ``rotary_dim`` features of ``x`` by ``angles`` (broadcastable to
    ``[..., seq, rotary_dim/2]``, compute dtype), cos and sin times ``factor``; the other
    features pass through; the result has the dtype of ``x``."""
    cos, sin = cos_sin(xp, angles, factor)
    return apply_cos_sin(xp, x, cos, sin, rotary_dim=rotary_dim, layout=layout)


def cos_sin(xp: ModuleType, angles: Any, factor: float = 1.0) -> tuple[Any, Any]:
    """``(cos, sin)`` of ``angles``, both times ``factor`` (the attention factor)."""
    cos, sin = xp.cos(angles), xp.sin(angles)
    if factor != 1.0:
        cos, sin = cos * factor, sin * factor
    return cos, sin


def apply_cos_sin(xp: ModuleType, x: Any, cos: Any, sin: Any, *, rotary_dim: int,
                  layout: str) -> Any:
    """:func:`apply` from ``cos`` and ``sin`` (compute dtype) instead of angles."""
    whole = rotary_dim == int(x.shape[-1])
    head = xp.astype(x if whole else x[..., :rotary_dim], cos.dtype, copy=False)
    rotated = xp.astype(rotate(xp, head, cos, sin, layout), x.dtype, copy=False)
    if whole:
        return rotated
    return xp.concat([rotated, x[..., rotary_dim:]], axis=-1)
