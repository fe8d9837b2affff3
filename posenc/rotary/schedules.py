"""RoPE frequency schedules in float64, one frequency at a time, from the published rules.

Reference code, public for the rotary references (posenc/reference/), the diagnoses and the
tests; `posenc golden` hashes it with every reference that imports it. Each schedule returns
``(inv_freq, attention_factor)`` for a rotary width ``r``; the rules are those of transformers
5.x ``ROPE_INIT_FUNCTIONS`` (which the goldens are checked against), written out here
independently of posenc.encodings. NumPy and the standard library only.
"""

from __future__ import annotations

import math

import numpy as np


def kind(scaling):
    if not scaling:
        return "default"
    name = scaling.get("rope_type", scaling.get("type", "default"))
    if name == "xdrope":  # HunyuanOCR's label, dynamic to transformers' HunYuanVLTextConfig
        name = "dynamic"
    if name == "dynamic" and scaling.get("alpha"):  # Hunyuan's label for a fixed alpha
        return "ntk_alpha"
    return "default" if name == "mrope" else name


def rotary_width(dim, scaling):
    """Features rotated: int(dim * partial_rotary_factor), all of them for 'proportional'."""
    if scaling and kind(scaling) != "proportional" and "partial_rotary_factor" in scaling:
        return int(dim * scaling["partial_rotary_factor"])
    return dim


def _theta(base, i, r):
    return 1.0 / math.pow(base, 2.0 * i / r)


def _ratio_factor(scaling):
    if scaling.get("factor") is not None:
        return float(scaling["factor"])
    return scaling["max_position_embeddings"] / scaling["original_max_position_embeddings"]


def frequencies(r, base, scaling, seq_len):
    """``(list of r/2 inverse frequencies, attention factor)``."""
    name = kind(scaling)
    scaling = dict(scaling or {})
    base = float(scaling.get("rope_theta") or base)
    n = r // 2
    if name == "default":
        return [_theta(base, i, r) for i in range(n)], 1.0
    if name == "linear":
        return [_theta(base, i, r) / scaling["factor"] for i in range(n)], 1.0
    if name == "ntk":  # base' = base * s^(r/(r-2))
        scaled = base * scaling["factor"] ** (r / (r - 2))
        return [_theta(scaled, i, r) for i in range(n)], 1.0
    if name == "ntk_alpha":  # Hunyuan: base' = base * alpha^(r/(r-2)), static
        scaled = base * scaling["alpha"] ** (r / (r - 2))
        return [_theta(scaled, i, r) for i in range(n)], 1.0
    if name == "dynamic":
        trained = scaling.get("max_position_embeddings") or \
            scaling["original_max_position_embeddings"]
        length = trained if seq_len is None else max(seq_len, trained)
        s = scaling["factor"]
        scaled = base * (s * length / trained - (s - 1)) ** (r / (r - 2))
        return [_theta(scaled, i, r) for i in range(n)], 1.0
    if name == "yarn":
        return _yarn(r, base, scaling)
    if name == "llama3":
        return _llama3(r, base, scaling), 1.0
    if name == "longrope":
        trained = scaling["original_max_position_embeddings"]
        use_long = seq_len is not None and seq_len > trained
        ext = scaling["long_factor"] if use_long else scaling["short_factor"]
        s = _ratio_factor(scaling)
        attention = scaling.get("attention_factor")
        if attention is None:
            attention = 1.0 if s <= 1 else math.sqrt(1 + math.log(s) / math.log(trained))
        return [_theta(base, i, r) / ext[i] for i in range(n)], attention
    if name == "proportional":
        rotated = int(scaling.get("partial_rotary_factor", 1.0) * r // 2)
        s = scaling.get("factor") or 1.0
        return [(_theta(base, i, r) if i < rotated else 0.0) / s for i in range(n)], 1.0
    raise ValueError(f"rope_type={name!r}")


def _yarn_mscale(s, m=1.0):
    return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0


def _yarn(r, base, scaling):
    """YaRN (Peng et al. 2023) as transformers computes it: a linear ramp over the pair
    index between the dimensions whose wavelength fits beta_fast and beta_slow rotations in
    the original context, blending extrapolation (theta) into interpolation (theta / s)."""
    s = _ratio_factor(scaling)
    trained = scaling["original_max_position_embeddings"]
    fast = scaling.get("beta_fast") or 32
    slow = scaling.get("beta_slow") or 1

    def dim_of(rotations):  # the (fractional) pair index with that many rotations over L0
        return r * math.log(trained / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = dim_of(fast), dim_of(slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, r - 1)
    if low == high:
        high += 0.001
    out = []
    for i in range(r // 2):
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)  # 0: keep theta, 1: theta / s
        theta = _theta(base, i, r)
        out.append(theta * (1 - ramp) + theta / s * ramp)
    attention = scaling.get("attention_factor")
    if attention is None:
        m, m_all = scaling.get("mscale"), scaling.get("mscale_all_dim")
        attention = (_yarn_mscale(s, m) / _yarn_mscale(s, m_all) if m and m_all
                     else _yarn_mscale(s))
    return out, attention


def _llama3(r, base, scaling):
    """Llama 3.1: keep wavelengths below L0/high_freq_factor, divide those above
    L0/low_freq_factor by s, blend in between by (L0/wavelength - low)/(high - low)."""
    s, trained = scaling["factor"], scaling["original_max_position_embeddings"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    out = []
    for i in range(r // 2):
        theta = _theta(base, i, r)
        wavelength = 2 * math.pi / theta
        if wavelength < trained / high:
            out.append(theta)
        elif wavelength > trained / low:
            out.append(theta / s)
        elif high == low:  # an empty band (Llama 4 Scout): its one edge keeps theta
            out.append(theta)
        else:
            smooth = (trained / wavelength - low) / (high - low)
            out.append((1 - smooth) * theta / s + smooth * theta)
    return out


def as_array(values):
    return np.array(values, dtype=np.float64)
