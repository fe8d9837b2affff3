"""Axial RoPE over a grid: each axis a owns d_a/2 consecutive rotary frequencies
base^(-2i/d_a), driven by that axis' coordinate (FLUX EmbedND, RoPE-ViT axial)."""

from __future__ import annotations

import math

import numpy as np


def _frequencies(axes_dims, base):
    """[(axis, theta)] for the r/2 frequencies, axes in order."""
    return [(a, base ** (-2.0 * i / d)) for a, d in enumerate(axes_dims) for i in range(d // 2)]


def _pairs(r, layout):
    if layout == "interleaved":  # FLUX apply_rope: (2j, 2j+1)
        return [(2 * j, 2 * j + 1) for j in range(r // 2)]
    return [(j, j + r // 2) for j in range(r // 2)]  # rotate_half over the whole rotary width


def axial_rope(x, positions, *, axes_dims, base, layout):
    x = np.asarray(x, dtype=np.float64)
    positions = np.asarray(positions)
    dim, n_axes = x.shape[-1], positions.shape[-1]
    if axes_dims is None:
        axes_dims = [dim // n_axes] * n_axes
    freqs = _frequencies(axes_dims, base)
    r = sum(axes_dims)
    out = x.copy()
    for idx in np.ndindex(x.shape[:-1]):
        s = idx[-1]
        coords = positions[s] if positions.ndim == 2 else positions[idx[0], s]
        for (axis, theta), (a, b) in zip(freqs, _pairs(r, layout), strict=True):
            angle = float(coords[axis]) * theta
            c, sn = math.cos(angle), math.sin(angle)
            xa, xb = x[idx][a], x[idx][b]
            out[(*idx, a)] = xa * c - xb * sn
            out[(*idx, b)] = xb * c + xa * sn
    return out


def angle_bound(x, positions, *, axes_dims, base, layout):
    return float(np.max(np.abs(np.asarray(positions)), initial=0))  # every theta <= 1
