"""Multimodal RoPE: the ordinary RoPE frequencies, each driven by one row of the position ids
(t, h, w, ...). Orderings: Qwen2-VL contiguous runs, Qwen3-VL interleave, ERNIE 4.5-VL and
Bailing (h/w alternating, t last), transformers' HunYuanVL XD-RoPE (runs over [theta, theta])."""

from __future__ import annotations

import math

import numpy as np

from ..rotary.schedules import frequencies, rotary_width

_PREFIXES = {"ernie4_5_vl": "ernie", "bailing": "bailing", "ming": "bailing",
             "hunyuan_vl": "xdrope"}


def resolve_ordering(ordering, interleaved, scaling):
    """The ordering the parameters and the config name (the spec's conventions)."""
    if ordering is not None:
        return ordering
    cfg = scaling or {}
    if interleaved or cfg.get("mrope_interleaved"):
        return "interleaved"
    if "xdrope_section" in cfg or "xdrope" in (cfg.get("rope_type"), cfg.get("type")):
        return "xdrope"
    for prefix, name in _PREFIXES.items():
        if str(cfg.get("model_type", "")).startswith(prefix):
            return name
    return "contiguous"


def _run(j, sizes):
    """The index of the run (of consecutive ``sizes``) that holds ``j``."""
    end = 0
    for i, size in enumerate(sizes):
        end += size
        if j < end:
            return i
    raise IndexError(j)


def _row(k, ordering, sections, n):
    """The row of position ids driving feature k of the doubled vector [theta, theta]: k < n is
    the first feature of pair k, k >= n the second feature of pair k - n."""
    j = k % n
    if ordering == "contiguous":
        return _run(j, sections)
    if ordering == "interleaved":  # Qwen3-VL: h takes 1, 4, 7, ... below 3*s_h; w 2, 5, ...
        if j % 3 == 1 and j < 3 * sections[1]:
            return 1
        if j % 3 == 2 and j < 3 * sections[2]:
            return 2
        return 0
    if ordering in ("ernie", "bailing"):  # ERNIE [h, w, t], Bailing [t, h, w]; s_h == s_w
        s_h = sections[0] if ordering == "ernie" else sections[1]
        if j < 2 * s_h:
            return 1 if j % 2 == 0 else 2  # h, w, h, w, ...
        return 0
    return _run(k, [2 * s for s in sections])  # xdrope


def _pairs(r, layout):
    if layout == "interleaved":
        return [(2 * j, 2 * j + 1) for j in range(r // 2)]
    return [(j, j + r // 2) for j in range(r // 2)]


def mrope(x, positions, *, sections, ordering, interleaved, base, layout, scaling):
    x = np.asarray(x, dtype=np.float64)
    positions = np.asarray(positions)
    dim = x.shape[-1]
    cfg = dict(scaling or {})
    if sections is None:
        sections = cfg.get("mrope_section", cfg.get("xdrope_section"))
    ordering = resolve_ordering(ordering, interleaved, cfg)
    r = rotary_width(dim, cfg or None)
    n = r // 2
    # longrope switches to its long factors once the positions pass the trained length
    seq_len = int(np.max(positions)) + 1 if positions.size else None
    thetas, attention = frequencies(r, base, cfg or None, seq_len)
    rows = [(_row(j, ordering, sections, n), _row(j + n, ordering, sections, n))
            for j in range(n)]
    out = x.copy()
    for idx in np.ndindex(x.shape[:-1]):
        s = idx[-1]
        ids = positions[:, s] if positions.ndim == 2 else positions[:, idx[0], s]
        for j, (a, b) in enumerate(_pairs(r, layout)):
            angle_a = float(ids[rows[j][0]]) * thetas[j]
            angle_b = float(ids[rows[j][1]]) * thetas[j]
            ca, sa = attention * math.cos(angle_a), attention * math.sin(angle_a)
            cb, sb = attention * math.cos(angle_b), attention * math.sin(angle_b)
            xa, xb = x[idx][a], x[idx][b]
            out[(*idx, a)] = xa * ca - xb * sa
            out[(*idx, b)] = xb * cb + xa * sb
    return out


def angle_bound(x, positions, *, sections, ordering, interleaved, base, layout, scaling):
    return float(np.max(np.abs(np.asarray(positions)), initial=0))  # every theta_j <= 1
