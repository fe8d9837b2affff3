"""MLA decoupled rope (DeepSeek-V2/V3): the trailing rotary slice of each query head and the one
shared rotary key head, rotated with a rope_scaling schedule; the softmax scale with YaRN's
mscale² (transformers' yarn_apply_mscale)."""

from __future__ import annotations

import math

import numpy as np

from ..rotary.schedules import frequencies, kind


def _rotate(x, positions, thetas, attention, layout):
    """Rotate the last axis (width r) of x [..., seq, r]: ``half`` pairs (j, j + r/2);
    ``deinterleave`` takes the pairs (2j, 2j+1) and writes them to (j, j + r/2);
    ``interleaved`` rotates (2j, 2j+1) in place."""
    r = x.shape[-1]
    out = np.zeros_like(x)
    for idx in np.ndindex(x.shape[:-1]):
        s = idx[-1]
        m = float(positions[s] if positions.ndim == 1 else positions[idx[0], s])
        for j in range(r // 2):
            a, b = (j, j + r // 2) if layout == "half" else (2 * j, 2 * j + 1)
            out_a, out_b = (a, b) if layout != "deinterleave" else (j, j + r // 2)
            c = math.cos(m * thetas[j]) * attention
            sn = math.sin(m * thetas[j]) * attention
            out[(*idx, out_a)] = x[idx][a] * c - x[idx][b] * sn
            out[(*idx, out_b)] = x[idx][b] * c + x[idx][a] * sn
    return out


def _mscale(factor, m):
    return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0


def mla_rope(q, k_rot, positions, *, base, layout, scaling):
    q = np.asarray(q, dtype=np.float64)
    k_rot = np.asarray(k_rot, dtype=np.float64)
    r = k_rot.shape[-1]
    nope = q.shape[-1] - r
    positions = np.arange(q.shape[-2]) if positions is None else np.asarray(positions)
    thetas, attention = frequencies(r, base, scaling, None)
    q_out = q.copy()
    q_out[..., nope:] = _rotate(q[..., nope:], positions, thetas, attention, layout)
    k_out = _rotate(k_rot, positions, thetas, attention, layout)
    scale = q.shape[-1] ** -0.5
    if scaling and kind(scaling) != "default" and scaling.get("mscale_all_dim"):
        scale *= _mscale(scaling["factor"], scaling["mscale_all_dim"]) ** 2
    return q_out, k_out, scale


def angle_bound(q, k_rot, positions, *, base, layout, scaling):
    pos = np.arange(np.asarray(q).shape[-2]) if positions is None else np.asarray(positions)
    return float(np.max(np.abs(pos), initial=0))
