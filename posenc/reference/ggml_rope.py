"""llama.cpp / ggml rope (ggml_rope_ext, ggml_rope_multi) as ggml-cpu computes it: the angle of
each pair built incrementally in float32 (theta *= theta_scale), divided by the freq_factors
tensor, blended by YaRN's ramp, cos/sin rounded to float32 and multiplied by the attention
factor (YaRN's internal mscale included). Written from ggml/src/ggml-cpu/ops.cpp
(rope_yarn, ggml_rope_cache_init, ggml_mrope_cache_init, rotate_pairs) and ggml/src/ggml.c
(ggml_rope_yarn_corr_dims); the rotation of x is done in float64.

YaRN's blend ``theta_interp * (1 - ramp_mix) + theta_extrap * ramp_mix`` is modelled as the
compiler emits it where the target has a fused multiply-add (aarch64; x86-64 with FMA, as
ggml's native and AVX2 builds are; GCC contracts by default): the second product rounded to
float32, the first fused into the sum, which rounds once. Checked against ggml-python 0.0.45
(ggml-cpu built -march=native): within one float32 ulp of cos/sin at every entry, where two
separate roundings are up to 1.2e-3 off at position 2**20 (tests/peers/test_engines.py)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

f32 = np.float32
MULTI = ("mrope", "imrope", "vision")


def _corr_dims(n_dims, n_ctx_orig, base, beta_fast, beta_slow):
    def corr_dim(n_rot):  # n_dims * logf(n_ctx_orig / (n_rot * 2 * pi)) / (2 * logf(base))
        inner = f32(n_ctx_orig) / (f32(n_rot) * f32(2) * f32(math.pi))
        return f32(n_dims) * f32(math.log(inner)) / (f32(2) * f32(math.log(f32(base))))

    start = math.floor(corr_dim(beta_fast))
    end = math.ceil(corr_dim(beta_slow))
    return f32(max(0, start)), f32(min(n_dims - 1, end))


def _fma32(a, b, c):
    """fmaf(a, b, c): a*b + c computed exactly and rounded once to float32 (to nearest, ties to
    even)."""
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    near = f32(float(exact))  # within one float32 step of the correctly rounded value
    steps = (np.nextafter(near, f32(-np.inf)), near, np.nextafter(near, f32(np.inf)))
    return min(steps, key=lambda v: (abs(Fraction(float(v)) - exact),
                                     int(np.array(v).view(np.uint32)) & 1))


def _cos_sin(theta_extrap, pair, freq_scale, corr, ext_factor, attn_factor):
    """rope_yarn of one pair: float32 throughout, as ggml-cpu."""
    theta_interp = f32(freq_scale) * theta_extrap
    theta = theta_interp
    mscale = f32(attn_factor)
    if ext_factor != 0.0:
        y = (f32(pair) - corr[0]) / max(f32(0.001), corr[1] - corr[0])
        ramp_mix = (f32(1) - min(f32(1), max(f32(0), y))) * f32(ext_factor)
        theta = _fma32(theta_interp, f32(1) - ramp_mix, theta_extrap * ramp_mix)
        mscale = mscale * (f32(1) + f32(0.1) * f32(math.log(f32(1) / f32(freq_scale))))
    return f32(math.cos(theta)) * mscale, f32(math.sin(theta)) * mscale


def _angles(pos, n_pairs, mode, sections, theta_scale):
    """The float32 angle of every pair at one token (pos: 1 or 4 position ids)."""
    if mode not in MULTI:
        out, theta = [], f32(pos[0])
        for _ in range(n_pairs):
            out.append(theta)
            theta = theta * theta_scale
        return out
    total = sum(sections)
    starts = (0, sections[0], sections[0] + sections[1], sections[0] + sections[1] + sections[2])
    chains = [f32(p) for p in pos]  # t, h, w, e
    out = []
    for i in range(n_pairs):
        sector = i % total
        if mode == "vision":  # every section restarts its ladder at its first pair
            for k in range(4):
                if sector == starts[k]:
                    chains[k] = f32(pos[k])
        if mode == "imrope":
            if sector % 3 == 1 and sector < 3 * sections[1]:
                pick = 1
            elif sector % 3 == 2 and sector < 3 * sections[2]:
                pick = 2
            elif sector % 3 == 0 and sector < 3 * sections[0]:
                pick = 0
            else:
                pick = 3
        else:
            pick = 0 if sector < starts[1] else 1 if sector < starts[2] else \
                2 if sector < starts[3] else 3
        out.append(chains[pick])
        chains = [c * theta_scale for c in chains]
    return out


def ggml_rope(x, positions, *, n_dims, mode, freq_base, freq_scale, ext_factor, attn_factor,
              beta_fast, beta_slow, n_ctx_orig, sections, freq_factors):
    x = np.asarray(x, dtype=np.float64)
    dim = x.shape[-1]
    if n_dims is None:
        n_dims = dim // 2 if mode == "vision" else dim
    theta_scale = f32(math.pow(f32(freq_base), f32(-2.0) / f32(n_dims)))
    # only YaRN reads the correction dims (ggml computes them anyway: logf(0) = -inf)
    corr = _corr_dims(n_dims, n_ctx_orig, freq_base, beta_fast, beta_slow) if ext_factor else None
    n_pairs = n_dims if mode == "vision" else n_dims // 2
    if mode == "normal":
        pairs = [(2 * i, 2 * i + 1) for i in range(n_pairs)]
    else:  # neox ordering (mrope, imrope and vision too); vision pairs (i, i + n_dims)
        offset = n_dims if mode == "vision" else n_dims // 2
        pairs = [(i, i + offset) for i in range(n_pairs)]
    pos = np.asarray(positions)
    out = x.copy()
    seq = x.shape[-2]
    for s in range(seq):
        ids = [int(pos[s])] if pos.ndim == 1 else [int(pos[k, s]) for k in range(4)]
        thetas = _angles(ids, n_pairs, mode, sections, theta_scale)
        for i, (a, b) in enumerate(pairs):
            ff = f32(freq_factors[i]) if freq_factors is not None else f32(1)
            # ggml's ramp reads the pair index i0/2; vision pairs are indexed the same way
            c, sn = _cos_sin(thetas[i] / ff, i, freq_scale, corr, ext_factor, attn_factor)
            c, sn = float(c), float(sn)
            xa, xb = x[..., s, a].copy(), x[..., s, b].copy()
            out[..., s, a] = xa * c - xb * sn
            out[..., s, b] = xa * sn + xb * c
    return out


def angle_bound(x, positions, *, n_dims, mode, freq_base, freq_scale, ext_factor, attn_factor,
                beta_fast, beta_slow, n_ctx_orig, sections, freq_factors):
    top = float(np.max(np.abs(np.asarray(positions)), initial=0))
    smallest = min(freq_factors) if freq_factors is not None else 1.0
    return top * max(1.0, freq_scale) / min(1.0, smallest)
