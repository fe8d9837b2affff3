"""Multimodal RoPE (Qwen2-VL M-RoPE, Qwen3-VL interleaved): ordinary RoPE frequencies, each
driven by one of three position ids (temporal, height, width)."""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .. import array_api, params, rotary, validation
from ..errors import ParameterError
from ..layers import Layer
from .rope_frequencies import Schedule, schedule, schedule_type

__all__ = ["mrope"]

AXES = ("t", "h", "w")


def _sections(value: Any) -> tuple[int, int, int]:
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != 3:
        raise ParameterError(
            f"sections={value!r} must be a list of 3 ints (frequencies driven by t, h, w)")
    for i, s in enumerate(value):
        if isinstance(s, bool) or not isinstance(s, int | np.integer):
            raise ParameterError(f"sections={list(value)!r}: sections[{i}]={s!r} is not an int")
        if s < 0:
            raise ParameterError(f"sections={list(value)!r}: sections[{i}]={s} is negative")
    return int(value[0]), int(value[1]), int(value[2])


def axis_of_frequency(sections: tuple[int, int, int], n: int, interleaved: bool) -> list[int]:
    """The axis (0 = t, 1 = h, 2 = w) of each of the ``n`` frequencies.

    Qwen2-VL: contiguous runs ``t^s0 h^s1 w^s2``. Qwen3-VL (``interleaved``): frequency ``j``
    is h when ``j % 3 == 1`` and ``j < 3 s1``, w when ``j % 3 == 2`` and ``j < 3 s2``, else t.
    Plain Python: torch.compile traces host NumPy, and these are static choices.
    """
    if sum(sections) != n:
        raise ParameterError(
            f"sections={list(sections)!r} sum to {sum(sections)}, but the rotary width has "
            f"{n} frequencies (rotary_dim / 2): they must sum to {n}")
    if not interleaved:
        return [a for a, count in enumerate(sections) for _ in range(count)]
    axis = [1 if j % 3 == 1 and j < 3 * sections[1] else
            2 if j % 3 == 2 and j < 3 * sections[2] else 0 for j in range(n)]
    counts = tuple(axis.count(a) for a in range(3))
    if counts != sections:
        raise ParameterError(
            f"sections={list(sections)!r} with interleaved=True: every third frequency from "
            f"index 1 (h) and 2 (w) up to 3 * section gives counts {list(counts)!r} among {n} "
            "frequencies; the h and w sections must satisfy 3 * sections[1] <= n + 1 and "
            "3 * sections[2] <= n")
    return axis


def _configure(dim: int, sections: Any, interleaved: Any, base: float,
               scaling: Mapping[str, Any] | None) -> tuple[Schedule, list[int]]:
    name = schedule_type(scaling)
    if not isinstance(interleaved, bool | np.bool_):
        raise ParameterError(f"interleaved must be a bool, got {interleaved!r}")
    if scaling is not None:
        if sections is None:
            if "mrope_section" not in scaling:
                raise ParameterError(
                    "sections=None and scaling has no 'mrope_section': pass sections=[t, h, w] "
                    f"(got scaling={dict(scaling)!r})")
            sections = scaling["mrope_section"]
        elif ("mrope_section" in scaling
              and _sections(scaling["mrope_section"]) != _sections(sections)):
            raise ParameterError(f"sections={list(sections)!r} conflicts with "
                                 f"scaling['mrope_section']={scaling['mrope_section']!r}: give one")
        flag = scaling.get("mrope_interleaved", False)
        if not isinstance(flag, bool | np.bool_):
            raise ParameterError(f"scaling['mrope_interleaved'] must be a bool, got {flag!r}")
        interleaved = bool(interleaved or flag)
    elif sections is None:
        raise ParameterError("sections=None: pass sections=[t, h, w] (frequency counts summing "
                             "to rotary_dim / 2) or a scaling dict with 'mrope_section'")
    if name == "dynamic":
        raise ParameterError("scaling['rope_type']='dynamic' depends on the current sequence "
                             "length, which mrope does not take: resolve the frequencies with "
                             "rope_frequencies(seq_len=...) and pass a fixed schedule")
    sched = schedule(dim, base=base, scaling=scaling)
    axis = axis_of_frequency(_sections(sections), sched.rotary_dim // 2, bool(interleaved))
    return sched, axis


def _bad_positions(pshape: tuple[int, ...], xshape: tuple[int, ...]) -> str:
    seq = xshape[-2]
    return (f"positions has shape {pshape} but x has shape {xshape}: positions must be "
            f"[3, seq] = [3, {seq}] or [3, batch, seq] = [3, {xshape[0]}, {seq}] (t, h, w "
            "position ids; batched needs x.ndim >= 3)")


# positions may also be float32/float64 (array_api.check_positions_dtype)
_INPUTS = validation.Inputs("mrope", skip_kind=("positions",), messages={
    "shape:positions": lambda f: _bad_positions(f["shape"], f["shape_of"]["x"])})


def _check_shapes(xp: Any, x: Any, positions: Any) -> tuple[int, int]:
    _INPUTS.check(xp, x=x, positions=positions)
    # operator.index makes torch.compile specialise on dim (plain int() turns symbolic once a
    # recompile has seen other widths, and the host-side frequencies then become sympy)
    seq, dim = int(x.shape[-2]), operator.index(x.shape[-1])
    # batched ids: batch is x's first dim, which the declared shapes cannot say
    if positions.ndim == 3 and (x.ndim < 3 or positions.shape[1] != x.shape[0]):
        raise ParameterError(_bad_positions(tuple(positions.shape), tuple(x.shape)))
    return seq, dim


def mrope(
    x: Any, positions: Any, *, sections: Sequence[int] | None = None, interleaved: bool = False,
    base: float = 10000.0, layout: str = "half", scaling: Mapping[str, Any] | None = None,
) -> Any:
    """Rotate ``x`` (``[..., seq, dim]``) by multimodal positions; same shape and dtype as ``x``.

    ``positions``: ``[3, seq]`` or ``[3, batch, seq]`` integer (t, h, w) position ids
    (transformers' Qwen2-VL ``position_ids``); batched ids apply to ``x[b, ..., s, :]``.
    The frequencies are ordinary RoPE frequencies ``theta_j = base^(-2j/r)`` of the rotary
    width ``r`` (or those of ``scaling``'s schedule); ``sections = [s_t, s_h, s_w]`` (summing
    to ``r/2``) says which position id drives each frequency: contiguous runs (Qwen2-VL), or
    with ``interleaved=True`` every third frequency from 1 for h and from 2 for w (Qwen3-VL).
    ``sections=None`` takes ``scaling['mrope_section']``; ``scaling['mrope_interleaved']``
    sets ``interleaved``. ``layout`` pairs features as in :func:`posenc.rope` (``"half"``:
    transformers). When t = h = w, the result is that of rope.
    """
    xp = array_api.namespace(x=x, positions=positions)
    params.choice("layout", layout, rotary.LAYOUTS)
    device, positions = rotary.array_inputs(xp, x, positions)
    if positions is None:
        raise ParameterError("positions=None: mrope needs [3, seq] (t, h, w) position ids")
    seq, dim = _check_shapes(xp, x, positions)
    sched, axis = _configure(dim, sections, interleaved, base, scaling)
    rd, n = sched.rotary_dim, sched.rotary_dim // 2
    compute = array_api.compute_dtype(xp, x.dtype)
    array_api.check_positions_dtype(xp, positions)
    array_api.assert_position_range(xp, positions, compute=compute)

    # P[..., s, j] = positions[axis[j], ..., s]: a static selection, exact in any dtype
    p = xp.astype(positions, compute)
    is_h = array_api.asarray(xp, [a == 1 for a in axis], device=device)
    is_w = array_api.asarray(xp, [a == 2 for a in axis], device=device)
    per_freq = xp.where(is_h, p[1, ..., None], xp.where(is_w, p[2, ..., None], p[0, ..., None]))
    angles = rotary.scheduled_phases(xp, per_freq, sched, compute=compute, device=device,
                                      all_positions=p)
    if positions.ndim == 3:  # line batch up with x[b, ..., s, :]
        angles = xp.reshape(angles, (angles.shape[0], *([1] * (x.ndim - 3)), seq, n))
    return rotary.apply(xp, x, angles, rotary_dim=rd, layout=layout,
                         factor=sched.attention_factor)


LAYERS = (Layer(
    "MultimodalRotaryEmbedding", "mrope",
    config=("sections", "interleaved", "base", "layout", "scaling"),
    doc="Qwen2-VL M-RoPE: layer(x, positions [3, (batch,) seq])"),)
