"""RoPE frequency schedules (position interpolation, NTK-aware, dynamic NTK, YaRN, Llama 3.1,
LongRoPE, proportional, Hunyuan NTK-alpha): the inverse frequencies and the attention factor."""

from __future__ import annotations

from ..rotary.schedules import as_array, frequencies, rotary_width


def rope_frequencies(*, dim, base, scaling, seq_len):
    inv_freq, attention = frequencies(rotary_width(dim, scaling), base, scaling, seq_len)
    return as_array(inv_freq), float(attention)
