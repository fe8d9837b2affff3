"""Multimodal RoPE (Qwen2-VL M-RoPE; Qwen3-VL interleaved): the ordinary RoPE frequencies, each
driven by the temporal, height or width position id of the token."""

from __future__ import annotations

import math

import numpy as np

from ._rope_schedules import frequencies, rotary_width


def _axis(j, sections, interleaved):
    """Which position id (0 = t, 1 = h, 2 = w) drives frequency j."""
    if interleaved:  # Qwen3-VL: h takes 1, 4, 7, ... below 3*s_h; w takes 2, 5, ... below 3*s_w
        if j % 3 == 1 and j < 3 * sections[1]:
            return 1
        if j % 3 == 2 and j < 3 * sections[2]:
            return 2
        return 0
    # Qwen2-VL: the first s_t frequencies follow t, the next s_h follow h, the last s_w w
    if j < sections[0]:
        return 0
    if j < sections[0] + sections[1]:
        return 1
    return 2


def _pairs(r, layout):
    if layout == "interleaved":
        return [(2 * j, 2 * j + 1) for j in range(r // 2)]
    return [(j, j + r // 2) for j in range(r // 2)]


def mrope(x, positions, *, sections, interleaved, base, layout, scaling):
    x = np.asarray(x, dtype=np.float64)
    positions = np.asarray(positions)
    dim = x.shape[-1]
    if sections is None:
        sections = scaling["mrope_section"]
    interleaved = interleaved or bool((scaling or {}).get("mrope_interleaved", False))
    r = rotary_width(dim, scaling)
    # longrope switches to its long factors once the positions pass the trained length
    seq_len = int(np.max(positions)) + 1 if positions.size else None
    thetas, attention = frequencies(r, base, scaling, seq_len)
    out = x.copy()
    for idx in np.ndindex(x.shape[:-1]):
        s = idx[-1]
        ids = positions[:, s] if positions.ndim == 2 else positions[:, idx[0], s]
        for j, (a, b) in enumerate(_pairs(r, layout)):
            angle = float(ids[_axis(j, sections, interleaved)]) * thetas[j]
            c, sn = attention * math.cos(angle), attention * math.sin(angle)
            xa, xb = x[idx][a], x[idx][b]
            out[(*idx, a)] = xa * c - xb * sn
            out[(*idx, b)] = xb * c + xa * sn
    return out


def angle_bound(x, positions, *, sections, interleaved, base, layout, scaling):
    return float(np.max(np.abs(np.asarray(positions)), initial=0))  # every theta_j <= 1
