"""MLA decoupled rope (DeepSeek-V2/V3, GLM-MoE): rope on the trailing ``qk_rope_head_dim``
features of every query head and on one shared ``k_rot`` head (broadcast to all heads, cached
once), the checkpoint's interleaved pairs handled, and the softmax scale with YaRN's mscale²."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .. import array_api, params
from ..errors import ParameterError
from .rope import rope
from .rope_frequencies import schedule_type

__all__ = ["mla_rope"]

LAYOUTS = ("half", "deinterleave", "interleaved")


def softmax_scale(qk_head_dim: int, scaling: Mapping[str, Any] | None) -> float:
    """``qk_head_dim^-0.5``, times ``mscale(factor, mscale_all_dim)²`` for a scaled schedule
    with ``mscale_all_dim`` (transformers' ``yarn_apply_mscale``)."""
    scale = qk_head_dim ** -0.5
    if scaling and schedule_type(scaling) != "default" and scaling.get("mscale_all_dim"):
        factor = scaling.get("factor")
        if isinstance(factor, bool) or not isinstance(factor, int | float):
            raise ParameterError(f"scaling['factor']={factor!r} must be a number: the softmax "
                                 "scale's mscale needs it")
        mscale = scaling["mscale_all_dim"]
        if isinstance(mscale, bool) or not isinstance(mscale, int | float):
            raise ParameterError(f"scaling['mscale_all_dim']={mscale!r} must be a number")
        if factor > 1:
            scale *= (0.1 * mscale * math.log(factor) + 1.0) ** 2
    return scale


def _check(q: Any, k_rot: Any) -> tuple[int, int]:
    for name, a in (("q", q), ("k_rot", k_rot)):
        if not (hasattr(a, "shape") and hasattr(a, "dtype")):
            raise ParameterError(f"{name} must be an array, got {type(a).__name__}")
    if q.ndim < 2 or k_rot.ndim < 2:
        raise ParameterError(f"q and k_rot must have shape [..., seq, dim], got shapes "
                             f"{tuple(q.shape)} and {tuple(k_rot.shape)}")
    dim, r = int(q.shape[-1]), int(k_rot.shape[-1])
    if r < 2 or r % 2 or r >= dim:
        raise ParameterError(f"k_rot.shape[-1]={r} (qk_rope_head_dim) must be even, >= 2 and "
                             f"less than q.shape[-1]={dim} (qk_nope_head_dim + qk_rope_head_dim)")
    if int(q.shape[-2]) != int(k_rot.shape[-2]):
        raise ParameterError(f"q has {q.shape[-2]} tokens (shape {tuple(q.shape)}) but k_rot has "
                             f"{k_rot.shape[-2]} (shape {tuple(k_rot.shape)})")
    return dim, r


def mla_rope(
    q: Any, k_rot: Any, positions: Any = None, *, base: float = 10000.0,
    layout: str = "deinterleave", scaling: Mapping[str, Any] | None = None,
) -> tuple[Any, Any, float]:
    """``(q_embed, k_rot_embed, softmax_scale)`` of a multi-head latent attention layer.

    ``q``: ``[..., heads, seq, qk_nope_head_dim + qk_rope_head_dim]``; its trailing
    ``qk_rope_head_dim`` features are rotated, the leading ones pass through. ``k_rot``:
    ``[..., 1, seq, qk_rope_head_dim]`` (or without the head axis), the one rotary key head
    shared by all heads; rotated, it is what the cache keeps. ``layout``: ``"deinterleave"``
    (transformers' ``rope_interleave=True``, DeepSeek-V3 checkpoints): pairs ``(2j, 2j+1)``,
    written de-interleaved as ``(j, j + r/2)``; ``"half"`` (``rope_interleave=False``):
    ``rotate_half`` on the slice as it is; ``"interleaved"`` (DeepSeek's reference inference
    code, complex pairs): pairs ``(2j, 2j+1)`` rotated in place. ``deinterleave`` and
    ``interleaved`` give the same logits ``q·k`` but different cached keys. ``scaling``: a
    rope_scaling dict (DeepSeek's YaRN; ``factor`` and ``mscale_all_dim`` also enter the
    softmax scale ``qk_head_dim^-0.5 · mscale²``, returned as a float).
    """
    xp = array_api.namespace(q=q, k_rot=k_rot, positions=positions)
    params.choice("layout", layout, LAYOUTS)
    dim, r = _check(q, k_rot)
    array_api.check_floating(xp, "q", q)
    array_api.check_floating(xp, "k_rot", k_rot)
    nope = dim - r

    def rotated(x: Any, name: str) -> Any:
        if layout == "deinterleave":  # the checkpoint's (2j, 2j+1) pairs to (j, j + r/2)
            x = xp.concat([x[..., 0::2], x[..., 1::2]], axis=-1)
        try:
            return rope(x, positions, base=base, scaling=scaling,
                        layout="interleaved" if layout == "interleaved" else "half")
        except ParameterError as exc:  # rope's x is this slice
            if "positions" in str(exc) and " x " in f" {exc} ":
                raise ParameterError(f"{name} (rope's x below): {exc}") from None
            raise

    q_embed = xp.concat([q[..., :nope], rotated(q[..., nope:], "q's rope slice")], axis=-1)
    return q_embed, rotated(k_rot, "k_rot"), softmax_scale(dim, scaling)
