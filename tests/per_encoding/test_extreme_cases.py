"""Golden cases at numerical extremes catch the bugs they were added for: a softmax without the
max subtracted (overflow at large scores) and ALiBi distances rounded at long context."""

from __future__ import annotations

import numpy as np

from posenc.encodings import public_functions

from ..failing import broken_numpy, failing_checks

_IMPL = public_functions()


def _failing(overrides: dict, encoding: str, dtype: str) -> set[str]:
    return failing_checks(broken_numpy("extreme", **overrides), encodings=[encoding],
                          dtypes=[dtype], properties=False, gradients=False, qualified=False)


def _softmax_without_max(q, k, v, bias=None, mask=None, scale=None):
    q, k, v = (np.asarray(a) for a in (q, k, v))
    factor = 1 / float(np.sqrt(q.shape[-1])) if scale is None else float(scale)
    scores = q @ np.swapaxes(k, -1, -2) * factor
    if bias is not None:
        scores = scores + np.asarray(bias, dtype=scores.dtype)
    weights = np.exp(scores)
    if mask is not None:
        weights = np.where(mask, weights, 0.0)
    with np.errstate(invalid="ignore"):
        return (weights / weights.sum(-1, keepdims=True)) @ v


def test_large_logits_catch_a_softmax_that_overflows() -> None:
    with np.errstate(over="ignore"):
        found = _failing({"attention": _softmax_without_max}, "attention", "float32")
    assert "large_logits" in found
    assert "self_attention" not in found  # ordinary scores do not overflow


def _alibi_bf16_distances(num_heads, q_len, k_len, *, form="causal", max_bias=8.0, **kw):
    import ml_dtypes

    right = np.asarray(_IMPL["alibi_bias"](num_heads, q_len, k_len, form=form,
                                           max_bias=max_bias, **kw))
    if form != "causal":
        return right
    slopes = np.asarray(_IMPL["alibi_slopes"](num_heads, max_bias=max_bias), dtype=np.float64)
    i = np.arange(k_len - q_len, k_len)[:, None]
    distance = (i - np.arange(k_len)[None, :]).astype(ml_dtypes.bfloat16).astype(np.float64)
    return (-slopes[:, None, None] * distance).astype(right.dtype)


def test_a_long_cache_catches_distances_rounded_to_bfloat16() -> None:
    found = _failing({"alibi_bias": _alibi_bf16_distances}, "alibi_bias", "float64")
    assert "causal_decode_4096_keys" in found
    assert "causal_8_heads" not in found  # distances below 256 are exact in bfloat16
