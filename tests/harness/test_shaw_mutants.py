"""Classic Shaw porting bugs the shaw_scores / shaw_attention properties must catch."""

from __future__ import annotations

import numpy as np
import pytest


def _failing_properties(backend) -> dict[str, set[str]]:
    from ..failing import failing_by_encoding

    return failing_by_encoding(backend, max_examples=5, cases=False, qualified=False,
                               encodings=["shaw_scores", "shaw_attention"])


def _mutant(**overrides):
    import dataclasses

    from posenc.backends import get_backend

    return dataclasses.replace(get_backend("numpy"), name="shaw-mutant", overrides=overrides)


def test_properties_pass_unbroken() -> None:
    from posenc.backends import get_backend

    assert _failing_properties(get_backend("numpy")) == {}


def test_query_minus_key_mutant_is_caught() -> None:
    """HF BERT's sign with a Shaw table: the rows reversed."""
    from posenc.encodings import shaw

    def scores(q, k, table_k, **kw):
        return shaw.shaw_scores(q, k, table_k[::-1], **kw)

    def attention(q, k, v, table_k, table_v=None, **kw):
        return shaw.shaw_attention(q, k, v, table_k[::-1],
                                   None if table_v is None else table_v[::-1], **kw)

    found = _failing_properties(_mutant(shaw_scores=scores, shaw_attention=attention))
    assert "shaw_scores_clipped_toeplitz" in found["shaw_scores"], found
    assert "shaw_value_term_buckets" in found["shaw_attention"], found


def test_start_aligned_queries_mutant_is_caught() -> None:
    """Queries at 0..q_len-1 instead of the end of the keys (the KV-cache bug)."""
    from posenc.encodings import shaw

    def start_aligned(fn):
        def call(q, k, *args, mask=None, **kw):
            pad = k.shape[-2] - q.shape[-2]
            q_full = np.concatenate([q, np.zeros((*q.shape[:-2], pad, q.shape[-1]))], axis=-2)
            if mask is not None:
                mask = np.concatenate([np.broadcast_to(mask, (q.shape[-2], k.shape[-2])),
                                       np.ones((pad, k.shape[-2]), bool)], axis=-2)
                kw["mask"] = mask
            return fn(q_full, k, *args, **kw)[..., : q.shape[-2], :]
        return call

    found = _failing_properties(_mutant(shaw_scores=start_aligned(shaw.shaw_scores),
                                        shaw_attention=start_aligned(shaw.shaw_attention)))
    assert "shaw_kv_cache_rows" in found["shaw_scores"], found
    assert "shaw_kv_cache_rows" in found["shaw_attention"], found


def test_unclipped_value_buckets_mutant_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The value term's end rows taking only the keys exactly at ±K, not the whole tails."""
    from posenc.encodings import shaw

    def no_tails(xp, a, K, offset):
        q_len, k_len = a.shape[-2:]
        keys = np.arange(q_len)[:, None] + offset + np.arange(-K, K + 1)[None, :]
        inside = (keys >= 0) & (keys < k_len)
        picked = np.take_along_axis(a, np.broadcast_to(np.where(inside, keys, 0),
                                                       (*a.shape[:-2], *keys.shape)), axis=-1)
        return np.where(inside, picked, 0.0)

    from posenc.backends import get_backend

    monkeypatch.setattr(shaw, "_bucket_weights", no_tails)
    found = _failing_properties(get_backend("numpy"))
    assert "shaw_value_term_buckets" in found.get("shaw_attention", set()), found
    assert "shaw_scores" not in found, found
