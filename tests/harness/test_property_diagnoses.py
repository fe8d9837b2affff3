"""Declared diagnoses are named on failing properties too: under the conventional profile
(whose one-number allowance once hid a missing attention factor from the naming) and for
integer outputs (a T5 bucket whose log is taken in float32). The functions are written here
as outside code would be, in torch."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch

from posenc.backends import get_backend
from posenc.conformance import Options
from posenc.conformance.runner import plan, run


def _yarn_rope(x: Any, positions: Any, *, base: float = 10000.0, layout: str = "half",
               rotary_dim: Any = None, scaling: Any = None, seq_len: Any = None,
               with_factor: bool = True) -> Any:
    """A float32 YaRN rope as ports write it (half pairing); ``with_factor=False`` is the bug."""
    x = torch.as_tensor(np.asarray(x))
    pos = torch.as_tensor(np.asarray(positions))
    d = x.shape[-1]
    inv = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    factor = 1.0
    if scaling and scaling.get("type") == "longrope":  # positions past L0: the long factors
        f, l0 = scaling["factor"], scaling["original_max_position_embeddings"]
        inv = inv / torch.as_tensor(scaling["long_factor"], dtype=torch.float32)
        factor = math.sqrt(1 + math.log(f) / math.log(l0))
    elif scaling:
        f, l0 = scaling["factor"], scaling["original_max_position_embeddings"]
        lo = max(math.floor(d * math.log(l0 / (32 * 2 * math.pi)) / (2 * math.log(base))), 0)
        hi = min(math.ceil(d * math.log(l0 / (2 * math.pi)) / (2 * math.log(base))), d // 2 - 1)
        ramp = ((torch.arange(d // 2, dtype=torch.float32) - lo) / max(hi - lo, 1e-3)).clamp(0, 1)
        inv = inv / f * ramp + inv * (1 - ramp)
        factor = 0.1 * math.log(f) + 1 if with_factor else 1.0
    angles = pos.to(torch.float32)[..., None] * inv
    cos, sin = torch.cat([angles, angles], -1).cos() * factor, torch.cat([angles, angles], -1).sin() * factor
    rotated = torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1)
    return (x * cos + rotated * sin).numpy().astype(np.asarray(x).dtype)


def _attention_factor_result(rope: Any) -> Any:
    backend = dataclasses.replace(get_backend("numpy"), name="yarn-port", overrides={"rope": rope})
    options = Options(backends=[backend], encodings=["rope"], dtypes=["float32"], modes=["eager"],
                      gradients=False, cases=False, max_examples=3, precision="conventional")
    (result,) = run(options, checks=[c for c in plan(options) if c.name == "rope_attention_factor"])
    return result


def test_a_missing_attention_factor_is_named_under_the_conventional_profile() -> None:
    result = _attention_factor_result(lambda *a, **k: _yarn_rope(*a, with_factor=False, **k))
    assert result.status == "fail", result.message
    assert result.details["diagnosis"]["name"] == "attention_factor_missing", result.message
    assert "likely: attention factor missing" in result.message


def test_the_same_port_with_its_factor_passes() -> None:
    result = _attention_factor_result(_yarn_rope)
    assert result.status == "pass", result.message


def _bucket(relative_position: Any, *, bidirectional: bool = True, num_buckets: int = 32,
            max_distance: int = 128, log_dtype: Any = torch.float32) -> Any:
    """T5's bucket as transformers writes it; ``log_dtype`` float32 is the tie bug."""
    rp = torch.as_tensor(np.asarray(relative_position))
    out = torch.zeros_like(rp)
    if bidirectional:
        num_buckets //= 2
        out = out + (rp > 0).to(torch.long) * num_buckets
        rp = torch.abs(rp)
    else:
        rp = -torch.min(rp, torch.zeros_like(rp))
    max_exact = num_buckets // 2
    large = max_exact + (torch.log(rp.to(log_dtype) / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return (out + torch.where(rp < max_exact, rp, large)).numpy()


def _bucket_properties(bucket: Any) -> list[Any]:
    backend = dataclasses.replace(get_backend("numpy"), name="t5-port", overrides={"t5_bucket": bucket})
    options = Options(backends=[backend], encodings=["t5_bucket"], dtypes=["float64"],
                      modes=["eager"], gradients=False, cases=False, max_examples=20)
    return run(options, checks=plan(options))


def test_a_float32_log_tie_is_named_on_a_property() -> None:
    failed = [r for r in _bucket_properties(_bucket) if r.status == "fail"]
    assert failed, "the float32 log's dropped bucket fails no property"
    for result in failed:
        assert (result.details.get("diagnosis") or {}).get("name") == "float32_log", result.message
        assert "no known bug matched" not in result.message


def test_a_float64_log_bucket_passes_its_properties() -> None:
    results = _bucket_properties(lambda *a, **k: _bucket(*a, log_dtype=torch.float64, **k))
    assert results and all(r.status == "pass" for r in results), \
        [r.message for r in results if r.status != "pass"]
