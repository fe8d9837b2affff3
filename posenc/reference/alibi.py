"""ALiBi (Press et al. 2022): head slopes and the linear bias ``-m_h * (i - j)``.

Slopes are powers of two with rational exponents; the exponent is kept as an exact fraction
and only the final power is rounded to float64.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np


def _power_of_two(exponent: Fraction) -> float:
    """2**exponent rounded once: an exact integer part (ldexp) times 2**(fractional part)."""
    whole = math.floor(exponent)
    return math.ldexp(2.0 ** float(exponent - whole), whole)


def _geometric(n: int, max_bias: Fraction) -> list[Fraction]:
    """Exponents of the power-of-two sequence: m_h = 2**(-max_bias * h / n), h = 1..n."""
    return [-max_bias * h / n for h in range(1, n + 1)]


def alibi_slopes(*, num_heads, max_bias):
    if num_heads < 1 or max_bias <= 0:
        raise ValueError(f"num_heads={num_heads}, max_bias={max_bias}")
    max_bias = Fraction(max_bias)
    closest = 1
    while closest * 2 <= num_heads:
        closest *= 2
    exponents = _geometric(closest, max_bias)
    if closest < num_heads:
        # every other slope of the sequence for 2 * closest heads: h = 1, 3, 5, ... (odd powers)
        exponents += _geometric(2 * closest, max_bias)[0::2][: num_heads - closest]
    return np.array([_power_of_two(e) for e in exponents], dtype=np.float64)


def alibi_bias(*, num_heads, q_len, k_len, form, max_bias, head_dim):
    if not 0 <= q_len <= k_len:
        raise ValueError(f"q_len={q_len}, k_len={k_len}")
    out = _bias(num_heads, q_len, k_len, form, alibi_slopes(num_heads=num_heads,
                                                             max_bias=max_bias))
    if head_dim is not None:  # Falcon adds B to q kᵀ before dividing by sqrt(head_dim)
        out = out / math.sqrt(head_dim)
    return out


def _bias(num_heads, q_len, k_len, form, slopes):
    if form == "key_only":
        out = np.zeros((num_heads, 1, k_len), dtype=np.float64)
        for h in range(num_heads):
            for j in range(k_len):
                out[h, 0, j] = slopes[h] * j
        return out
    out = np.zeros((num_heads, q_len, k_len), dtype=np.float64)
    for h in range(num_heads):
        for r in range(q_len):
            i = k_len - q_len + r  # queries are the last q_len positions (KV cache)
            for j in range(k_len):
                if form == "causal":
                    out[h, r, j] = -slopes[h] * (i - j)
                elif form == "symmetric":
                    out[h, r, j] = -slopes[h] * abs(i - j)
                else:
                    raise ValueError(f"form={form!r}")
    return out
