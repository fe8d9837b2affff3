"""Multimodal RoPE (Qwen2-VL M-RoPE, Qwen3-VL interleaved, ERNIE 4.5-VL, Bailing, HunYuan
XD-RoPE): ordinary RoPE frequencies, each driven by one row of position ids (t, h, w, ...)."""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

from .. import array_api, params, validation
from ..errors import ParameterError
from ..layers import Layer
from ..rotary import mrope_orderings as orderings
from ..rotary import rotation
from .rope_frequencies import Schedule, schedule, schedule_type

__all__ = ["mrope"]

AXES = ("t", "h", "w")


def _configure(dim: int, sections: Any, ordering: Any, interleaved: Any, base: float,
               scaling: Mapping[str, Any] | None,
               ) -> tuple[Schedule, str, tuple[int, ...], list[int], list[int]]:
    """The frequency schedule, the ordering, the sections and the row of position ids driving
    each pair's first and second feature."""
    name = schedule_type(scaling)
    ordering = orderings.resolve(ordering, interleaved, scaling)
    from_config = None
    if scaling is not None:
        from_config = orderings.config_sections(scaling)
        if sections is None:
            if from_config is None:
                raise ParameterError(
                    "sections=None and scaling has no 'mrope_section': pass sections=[t, h, w] "
                    f"(got scaling={dict(scaling)!r})")
            sections = from_config
        elif (from_config is not None
              and orderings.sections_of(from_config) != orderings.sections_of(sections)):
            raise ParameterError(f"sections={list(sections)!r} conflicts with "
                                 f"scaling['mrope_section']={from_config!r}: give one")
    elif sections is None:
        raise ParameterError("sections=None: pass sections=[t, h, w] (frequency counts summing "
                             "to rotary_dim / 2) or a scaling dict with 'mrope_section'")
    if name == "dynamic":
        label = scaling.get("rope_type", scaling.get("type"))
        raise ParameterError(f"scaling['rope_type']={label!r} depends on the current sequence "
                             "length (dynamic NTK; Hunyuan's fixed NTK-alpha needs a nonzero "
                             "'alpha'), which mrope does not take: resolve the frequencies with "
                             "rope_frequencies(seq_len=...) and pass a fixed schedule")
    if scaling is None or "partial_rotary_factor" not in scaling:
        rotation.rotary_width(dim, None)  # an error names x's width, which sets the head
    sched = schedule(rotation.head_width(dim), base=base, scaling=scaling)
    configured = from_config is not None and sections is from_config
    try:
        sections = orderings.sections_of(sections)
        axis_a, axis_b = orderings.feature_axes(ordering, sections, sched.rotary_dim // 2)
    except ParameterError as exc:
        if configured:
            raise ParameterError(f"scaling['mrope_section']: {exc}") from None
        raise
    return sched, ordering, sections, axis_a, axis_b


def _bad_positions(pshape: tuple[int, ...], xshape: tuple[int, ...]) -> str:
    seq = xshape[-2]
    return (f"positions has shape {pshape} but x has shape {xshape}: positions must be "
            f"[axes, seq] = [axes, {seq}] or [axes, batch, seq] = [axes, {xshape[0]}, {seq}] "
            "(one row of position ids per axis: 3 for t, h, w; batched needs x.ndim >= 3)")


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


def _check_rows(positions: Any, x: Any, sections: Any, ordering: str, rows: int) -> None:
    if int(positions.shape[0]) != rows:
        pshape, xshape = tuple(positions.shape), tuple(x.shape)
        raise ParameterError(
            f"sections={list(sections)!r} with ordering={ordering!r} reads {rows} rows of "
            f"position ids, but positions has shape {pshape} (x has shape {xshape}): positions "
            f"must be [{rows}, seq] = [{rows}, {xshape[-2]}] or [{rows}, batch, seq] = "
            f"[{rows}, {xshape[0]}, {xshape[-2]}]")


def _per_frequency(xp: Any, p: Any, axis: list[int], device: Any) -> Any:
    """``P[..., s, j] = p[axis[j], ..., s]``: a static selection, exact in any dtype."""
    out = p[0, ..., None]
    for row in sorted(set(axis) - {0}):  # a few rows, fixed by the configuration
        mask = array_api.asarray(xp, [a == row for a in axis], device=device)
        out = xp.where(mask, p[row, ..., None], out)
    return out


def _rotate_split(xp: Any, x: Any, cos_a: Any, sin_a: Any, cos_b: Any, sin_b: Any, *,
                  rotary_dim: int, layout: str) -> Any:
    """(a, b) -> (a cos_a - b sin_a, b cos_b + a sin_b): each feature of a pair with its own
    angle (transformers' HunYuanVL; not a rotation unless the angles agree)."""
    r, n = rotary_dim, rotary_dim // 2
    head = xp.astype(x[..., :r], cos_a.dtype, copy=False)
    if layout == "half":
        a, b = head[..., :n], head[..., n:]
        out = xp.concat([a * cos_a - b * sin_a, b * cos_b + a * sin_b], axis=-1)
    else:
        pairs = xp.reshape(head, (*tuple(head.shape[:-1]), n, 2))
        a, b = pairs[..., 0], pairs[..., 1]
        out = xp.reshape(xp.stack([a * cos_a - b * sin_a, b * cos_b + a * sin_b], axis=-1),
                         (*tuple(head.shape[:-1]), r))
    out = xp.astype(out, x.dtype, copy=False)
    return out if r == int(x.shape[-1]) else xp.concat([out, x[..., r:]], axis=-1)


def mrope(
    x: Any, positions: Any, *, sections: Sequence[int] | None = None,
    ordering: str | None = None, interleaved: bool = False, base: float = 10000.0,
    layout: str = "half", scaling: Mapping[str, Any] | None = None,
) -> Any:
    """Rotate ``x`` (``[..., seq, dim]``) by multimodal positions; same shape and dtype as ``x``.

    ``positions``: ``[axes, seq]`` or ``[axes, batch, seq]`` integer position ids, one row per
    axis (t, h, w for the three-axis orderings: transformers' Qwen2-VL ``position_ids``);
    batched ids apply to ``x[b, ..., s, :]``. The frequencies are ordinary RoPE frequencies
    ``theta_j = base^(-2j/r)`` of the rotary width ``r`` (or those of ``scaling``'s schedule);
    ``sections`` (summing to ``r/2``) and ``ordering`` say which row drives each frequency:

    - ``contiguous`` (Qwen2-VL; also vLLM's XD-RoPE with 4 sections): runs of ``sections[i]``
      frequencies follow row ``i``;
    - ``interleaved`` (Qwen3-VL, also ``interleaved=True``): every third frequency from 1 for h,
      from 2 for w, t otherwise;
    - ``ernie`` (ERNIE 4.5-VL, sections ``[h, w, t]``) and ``bailing`` (Ling/Ming, sections
      ``[t, h, w]``): h and w alternate over the first ``2 s_h`` frequencies, t the rest;
    - ``xdrope`` (transformers' HunYuanVL): runs of ``2 sections[i]`` over the doubled vector
      ``[theta, theta]``, so the two features of a pair may follow different rows.

    ``sections=None`` takes ``scaling['mrope_section']`` (or ``xdrope_section``);
    ``scaling['mrope_interleaved']``, ``xdrope_section`` (or HunYuanVL's legacy type
    ``'xdrope'``, read as ``dynamic``: with its ``alpha``, NTK-alpha) or ``model_type`` name the
    ordering.
    ``layout`` pairs features as in :func:`posenc.rope` (``"half"``: transformers' Qwen and
    HunYuan; ERNIE 4.5-VL uses ``"interleaved"``). When all rows are equal, the result is rope.
    """
    xp = array_api.namespace(x=x, positions=positions)
    params.choice("layout", layout, rotation.LAYOUTS)
    device, positions = rotation.array_inputs(xp, x, positions)
    if positions is None:
        raise ParameterError("positions=None: mrope needs [3, seq] (t, h, w) position ids")
    seq, dim = _check_shapes(xp, x, positions)
    sched, ordering, sections, axis_a, axis_b = _configure(dim, sections, ordering, interleaved,
                                                           base, scaling)
    _check_rows(positions, x, sections, ordering, orderings.axes_count(ordering, sections))
    rd, n = sched.rotary_dim, sched.rotary_dim // 2
    compute = array_api.compute_dtype(xp, x.dtype)
    array_api.check_positions_dtype(xp, positions)
    array_api.assert_position_range(xp, positions, compute=compute)

    p = xp.astype(positions, compute)
    angles = [rotation.scheduled_phases(xp, _per_frequency(xp, p, axis, device), sched,
                                      compute=compute, device=device, all_positions=p)
              for axis in ((axis_a,) if axis_a == axis_b else (axis_a, axis_b))]
    if positions.ndim == 3:  # line batch up with x[b, ..., s, :]
        angles = [xp.reshape(t, (t.shape[0], *([1] * (x.ndim - 3)), seq, n)) for t in angles]
    if len(angles) == 1:
        return rotation.apply(xp, x, angles[0], rotary_dim=rd, layout=layout,
                            factor=sched.attention_factor)
    (cos_a, sin_a), (cos_b, sin_b) = (rotation.cos_sin(xp, t, sched.attention_factor)
                                      for t in angles)
    return _rotate_split(xp, x, cos_a, sin_a, cos_b, sin_b, rotary_dim=rd, layout=layout)


LAYERS = (Layer(
    "MultimodalRotaryEmbedding", "mrope",
    config=("sections", "ordering", "interleaved", "base", "layout", "scaling"),
    doc="M-RoPE (Qwen2-VL, Qwen3-VL, ERNIE 4.5-VL, Bailing, HunYuan XD-RoPE): "
        "layer(x, positions [axes, (batch,) seq])"),)
