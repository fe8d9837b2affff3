"""Transforms of M-RoPE's section orderings (``mrope``: ERNIE 4.5-VL, Bailing, HunYuan
XD-RoPE): the usual port bugs, each evaluated only on cases of its ordering (elsewhere the
reference's own output, which the harness then ignores)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..reference.mrope import resolve_ordering
from .base import Arrays, Reference, Transform, call, register


def _resolved(params: dict[str, Any]) -> tuple[str, list[int], dict[str, Any]]:
    """(ordering, sections, params with the ordering and sections explicit and the config's
    ordering keys dropped)."""
    cfg = dict(params.get("scaling") or {})
    ordering = resolve_ordering(params["ordering"], params["interleaved"], cfg)
    sections = list(params["sections"] or cfg.get("mrope_section") or cfg["xdrope_section"])
    for key in ("mrope_section", "xdrope_section", "model_type", "mrope_interleaved"):
        cfg.pop(key, None)
    plain = {**params, "ordering": ordering, "interleaved": False, "sections": sections,
             "scaling": cfg or None}
    return ordering, sections, plain


def _as_contiguous(*orderings: str) -> Any:
    """The config's sections fed to Qwen2-VL's contiguous runs."""
    def apply(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
        ordering, _, plain = _resolved(params)
        if ordering not in orderings:
            return call(ref, inputs, params)
        return call(ref, inputs, {**plain, "ordering": "contiguous"})
    return apply


def _section_order_swapped(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    """ERNIE's [h, w, t] read as Bailing's [t, h, w] (h and w alternate over the last two
    sections, t takes the first section's count at the tail), or the other way round."""
    ordering, sections, plain = _resolved(params)
    if ordering not in ("ernie", "bailing"):
        return call(ref, inputs, params)
    s0, s1, s2 = sections
    if ordering == "ernie":  # [h, w, t] read as [t, h, w]: t = s0, spatial = s1 + s2
        t, spatial = s0, s1 + s2
    else:  # Bailing's [t, h, w] read as [h, w, t]: spatial = s0 + s1, t = s2
        t, spatial = s2, s0 + s1
    if spatial % 2:
        raise ValueError("the misread sections give an odd spatial count")  # not this bug
    return call(ref, inputs, {**plain, "ordering": "ernie",
                               "sections": [spatial // 2, spatial // 2, t]})


def _rows_h_w_swapped(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    """Rows 1 and 2 exchanged: h and w (XD-RoPE: width and height, built in Qwen's t, h, w
    order)."""
    positions = np.asarray(inputs["positions"])
    return call(ref, {**inputs, "positions": positions[[0, 2, 1, *range(3, len(positions))]]},
                 params)


register(
    mrope_ernie_bailing_as_qwen2_vl=Transform(
        "the config's sections as Qwen2-VL's contiguous runs", _as_contiguous("ernie", "bailing"),
        params=("sections", "ordering", "interleaved", "scaling"), modules=("mrope",)),
    mrope_xdrope_as_vllm=Transform(
        "xdrope_section runs over the r/2 frequencies (ordering contiguous)",
        _as_contiguous("xdrope"), params=("sections", "ordering", "interleaved", "scaling"),
        modules=("mrope",)),
    mrope_section_order_swapped=Transform(
        "ERNIE's [h, w, t] sections read as [t, h, w] (Bailing's order), or Bailing's as ERNIE's",
        _section_order_swapped, params=("sections", "ordering", "interleaved", "scaling"),
        modules=("mrope",)),
    mrope_rows_h_w_swapped=Transform(
        "position rows 1 and 2 exchanged", _rows_h_w_swapped, inputs=("positions",),
        modules=("mrope",)),
)
