"""Rotary position embedding: rotate feature pairs of ``x`` by ``position * theta_i``."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

from .. import array_api, params
from ..errors import ParameterError
from ..layers import Layer
from ..rotary import rotation
from .rope_frequencies import Schedule, schedule, schedule_type

__all__ = ["rope"]


def rope_schedule(dim: int, rotary_dim: Any, base: float, scaling: Mapping[str, Any] | None,
                  seq_len: Any, positions: Any, seq: int) -> Schedule:
    """The frequency schedule :func:`rope` uses for a head of width ``dim`` (``seq``: the length
    of ``x``, the default ``seq_len`` of the dynamic and LongRoPE scalings): ``rotary_dim`` and
    ``scaling`` checked against each other and the head."""
    name = schedule_type(scaling)
    if scaling is not None and "mrope_section" in scaling:
        raise ParameterError("scaling has mrope_section: multimodal position ids need "
                             "posenc.mrope, not rope")
    if rotary_dim is not None and scaling is not None and "partial_rotary_factor" in scaling:
        raise ParameterError(f"rotary_dim={rotary_dim!r} and scaling['partial_rotary_factor']="
                             f"{scaling['partial_rotary_factor']!r}: give one")
    if seq_len is None and positions is None and name in ("dynamic", "longrope"):
        seq_len = seq  # the static length of x
    if seq_len is None and name == "dynamic":
        raise ParameterError(
            "rope_type='dynamic' needs seq_len= when positions are given (transformers uses "
            "max(position_ids) + 1; pass it explicitly: the frequencies depend on it)")
    if rotary_dim is not None or scaling is None or "partial_rotary_factor" not in scaling:
        width = rotation.rotary_width(dim, rotary_dim)
        if name == "proportional" and width != dim:
            raise ParameterError(f"rotary_dim={rotary_dim!r}: rope_type='proportional' rotates "
                                 "the whole head (use partial_rotary_factor)")
        return schedule(width, base=base, scaling=scaling, seq_len=seq_len)
    return schedule(rotation.head_width(dim), base=base, scaling=scaling, seq_len=seq_len)


def position_schedule(dim: int, rotary_dim: Any, base: float,
                      scaling: Mapping[str, Any] | None, seq_len: Any) -> Schedule | None:
    """The schedule :func:`rope` uses for explicit positions of any count (LongRoPE then
    switches at run time), or None where it depends on the length of each call: ``dynamic``
    NTK without ``seq_len``. Hunyuan's ``dynamic`` with an ``alpha`` is a fixed NTK-alpha
    (:func:`~posenc.encodings.rope_frequencies.schedule_type`), so it has one."""
    if seq_len is None and schedule_type(scaling) == "dynamic":
        return None
    return rope_schedule(dim, rotary_dim, base, scaling, seq_len, positions=True, seq=0)


def prepare(x: Any, positions: Any, *, base: float, layout: str, rotary_dim: Any,
            scaling: Mapping[str, Any] | None, seq_len: Any,
            check_range: bool = True) -> tuple[Any, Any, Any, Schedule]:
    """:func:`rope`'s arguments checked: ``(xp, device, positions, schedule)``, positions an
    array on the device of ``x`` (or None), exact and in range. Fused kernels share it
    (``check_range=False``: the kernel checks the positions' range itself)."""
    xp = array_api.namespace(x=x, positions=positions)
    params.choice("layout", layout, rotation.LAYOUTS)
    device, positions = rotation.array_inputs(xp, x, positions)
    seq, dim = rotation.check_shapes(x, positions)
    sched = rope_schedule(dim, rotary_dim, base, scaling, seq_len, positions, seq)
    if positions is not None:
        array_api.check_positions_dtype(xp, positions)
        if check_range:
            array_api.assert_position_range(xp, positions, compute=array_api.compute_dtype(xp, x.dtype))
    return xp, device, positions, sched


def rope(
    x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
    rotary_dim: int | None = None, scaling: Mapping[str, Any] | None = None,
    seq_len: int | None = None,
) -> Any:
    """Rotate ``x`` (``[..., seq, dim]``) by its positions; same shape and dtype as ``x``.

    ``positions``: ``[seq]`` or batched ``[batch, seq]`` (left padding; applies to
    ``x[b, ..., s, :]``), integers or float32/float64; default ``arange(seq)``.
    ``layout``: ``"half"`` pairs ``(i, i + r/2)`` (GPT-NeoX, transformers Llama),
    ``"interleaved"`` pairs ``(2i, 2i + 1)`` (RoFormer, GPT-J, Meta Llama).
    ``rotary_dim`` (even, ≤ dim) rotates the first features only; the rest pass through
    unchanged. ``scaling``: a transformers ``rope_scaling`` dict (see
    :func:`posenc.rope_frequencies`); its attention factor multiplies cos and sin.
    ``seq_len``: the length ``dynamic`` and ``longrope`` scale for; when omitted, the length of
    ``x`` if ``positions`` is omitted, else ``longrope`` switches to its long factors at run
    time when ``max(positions) + 1 > original_max_position_embeddings`` (no recompilation).
    Phases come from exact positions: float32 cos/sin are within ~5e-7 of the float64 truth
    at every position up to 2^24; the rotation runs in float32 (float64 for float64 ``x``).
    """
    cos, sin, rd = rope_cos_sin(x, positions, base=base, layout=layout, rotary_dim=rotary_dim,
                                scaling=scaling, seq_len=seq_len)
    return rotation.apply_cos_sin(array_api.namespace(x=x), x, cos, sin, rotary_dim=rd, layout=layout)


def rope_cos_sin(
    x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
    rotary_dim: int | None = None, scaling: Mapping[str, Any] | None = None,
    seq_len: int | None = None,
) -> tuple[Any, Any, int]:
    """``(cos, sin, rotary_dim)`` that :func:`rope` rotates ``x`` by, arguments checked alike:
    half-width ``[..., seq, rotary_dim/2]`` in the compute dtype, times the attention factor
    and lined up with ``x``. Tensors of ``x``'s shape but for the head count (a key beside its
    query) rotate by the same ones (``rotation.apply_cos_sin``)."""
    xp, device, positions, sched = prepare(x, positions, base=base, layout=layout,
                                           rotary_dim=rotary_dim, scaling=scaling,
                                           seq_len=seq_len)
    rd, seq = sched.rotary_dim, operator.index(x.shape[-2])
    compute = array_api.compute_dtype(xp, x.dtype)
    if positions is None:
        positions = xp.arange(seq, device=device) if device is not None else xp.arange(seq)
    integral = xp.isdtype(positions.dtype, "integral")
    p = xp.expand_dims(xp.astype(positions, compute), axis=-1)
    angles = rotation.scheduled_phases(xp, p, sched, compute=compute, device=device,
                                      integral=integral)
    if positions.ndim == 2:  # line batch up with x[b, ..., s, :]
        angles = xp.reshape(angles, (angles.shape[0], *([1] * (x.ndim - 3)), seq, rd // 2))
    cos, sin = rotation.cos_sin(xp, angles, sched.attention_factor)
    return cos, sin, rd


LAYERS = (Layer(
    "RotaryEmbedding", "rope", config=("base", "layout", "rotary_dim", "scaling", "seq_len"),
    doc="RoPE: layer(x, positions=None) -> x rotated"),)
