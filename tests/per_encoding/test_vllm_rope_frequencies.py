"""vllm_rope_frequencies: vLLM's get_rope frequencies, vectorised here. Where vLLM follows
transformers (default, linear, llama3, yarn) this folder's transformers schedule
(test_rope_frequencies) is reused; vLLM's own rules (NTK with and without Su's mixed_b, dynamic
NTK fixed at max_position, DeepSeek YaRN, LongRoPE chosen by max_model_len with its mscales,
Gemma 4's proportional exponents over the whole head) are written out below."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import posenc

from .mirror import golden_cases, implementation
from .test_rope_frequencies import expected_schedule


def _mscale(s: float, m: float) -> float:
    return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0


def expected_vllm(head: int, max_position: int, params: dict[str, Any] | None,
                  max_model_len: int | None) -> tuple[np.ndarray, float]:
    p = dict(params or {})
    kind, base = p.get("rope_type", "default"), float(p.get("rope_theta", 10000))
    r = int(head * p.get("partial_rotary_factor", 1.0))
    j = np.arange(r // 2)
    theta = np.power(base, -2.0 * j / r)
    if kind == "proportional":
        rotated = int(head * p.get("partial_rotary_factor", 1.0)) // 2
        i = np.arange(head // 2)
        return np.where(i < rotated, np.power(base, -2.0 * i / head), 0.0), 1.0
    if kind == "ntk" and p.get("mixed_b") is None:
        s = p["factor"]
        return np.power(base * s, -2.0 * j / r) * s ** (-2 / r), 1.0
    if kind == "ntk":  # lambda_j = exp(a j^b), j = 1..r/2, a = ln s / (r/2)^b
        a = math.log(p["factor"]) / (r / 2) ** p["mixed_b"]
        return theta * np.exp(-a * (j + 1.0) ** p["mixed_b"]), 1.0
    if kind == "dynamic" and "alpha" in p:
        return np.power(base * p["alpha"] ** (r / (r - 2)), -2.0 * j / r), 1.0
    if kind == "dynamic":  # scaled for max_position, whatever the request's length
        s, trained = p["factor"], p.get("max_trained_positions", max_position)
        return np.power(base * (s * max_position / trained - (s - 1)) ** (r / (r - 2)), -2.0 * j / r), 1.0
    if kind == "longrope":
        trained = p["original_max_position_embeddings"]
        long = (max_position if max_model_len is None else max_model_len) > trained
        scale = max_position / trained
        m = 1.0 if scale <= 1 else math.sqrt(1 + math.log(scale) / math.log(trained))
        m = p.get("long_mscale" if long else "short_mscale") or m
        return theta / np.asarray(p["long_factor" if long else "short_factor"]), m
    if kind == "deepseek_yarn":  # always truncated; mscale_all_dim 0 unless given
        s = p["factor"]
        attention = _mscale(s, p.get("mscale", 1)) / _mscale(s, p.get("mscale_all_dim", 0))
        p = {**p, "rope_type": "yarn", "truncate": True, "attention_factor": attention}
    return expected_schedule(head, base, p, None)


def test_mixed_ntk_by_hand() -> None:
    """Su's mixed NTK with b = 1: lambda_j = s^(j / (r/2)), so the slowest pair is divided by s."""
    inv_freq, _ = posenc.vllm_rope_frequencies(8, max_position=4096, dtype=np.float64,
                                               rope_parameters={"rope_type": "ntk", "factor": 16.0,
                                                                "mixed_b": 1.0})
    plain = 10000.0 ** (-np.arange(4) / 4)
    np.testing.assert_allclose(inv_freq, plain / 16.0 ** (np.arange(1, 5) / 4), rtol=1e-15)


@pytest.mark.parametrize("case", golden_cases("vllm_rope_frequencies"), ids=lambda c: c.name)
def test_reference_and_implementation_match_vllms_rules(case) -> None:
    p = case.params
    inv_freq, attention = expected_vllm(p["head_size"], p["max_position"], p["rope_parameters"],
                                        p["max_model_len"])
    expected = np.concatenate([inv_freq, [attention]])
    np.testing.assert_allclose(case.output, expected, rtol=1e-14, atol=0)
    ours, factor = implementation("vllm_rope_frequencies", case)
    np.testing.assert_allclose(np.concatenate([np.asarray(ours), [factor]]), expected, rtol=1e-14,
                               atol=0)
