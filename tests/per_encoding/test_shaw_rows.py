"""The table row shaw_scores uses for each query-key pair, typed by hand from the definition
row = clip(j − p_i, −K, K) + K, and HF BERT's relative_key as the reversed table."""

from __future__ import annotations

import math

import numpy as np


def _row_table(pe, q_len: int, k_len: int, K: int) -> np.ndarray:
    """The table row each pair uses, read back through shaw_scores: d = 1, q = 1, k = 0,
    table_k[r] = r and scale = 1 make s_ij the row index."""
    out = pe.shaw_scores(np.ones((q_len, 1)), np.zeros((k_len, 1)),
                         np.arange(2.0 * K + 1)[:, None], max_relative_position=K, scale=1.0)
    return np.asarray(out.numpy() if hasattr(out, "numpy") else out, dtype=np.float64)


def test_rows_self_attention(pe) -> None:
    assert _row_table(pe, 4, 4, 2).tolist() == [[2, 3, 4, 4],
                                                [1, 2, 3, 4],
                                                [0, 1, 2, 3],
                                                [0, 0, 1, 2]]


def test_rows_kv_cache_queries_sit_at_the_end(pe) -> None:
    # query positions 3 and 4 of 5 keys; distances key − query clipped to ±1
    assert _row_table(pe, 2, 5, 1).tolist() == [[0, 0, 0, 1, 2],
                                                [0, 0, 0, 0, 1]]


def test_rows_k_beyond_the_sequence(pe) -> None:
    # K = 5 > every distance: rows 5 + (j − i), rows 0 and 10 are never reached
    assert _row_table(pe, 3, 3, 5).tolist() == [[5, 6, 7], [4, 5, 6], [3, 4, 5]]


def test_rows_k_zero(pe) -> None:
    assert _row_table(pe, 2, 3, 0).tolist() == [[0, 0, 0], [0, 0, 0]]


def test_hf_bert_relative_key_is_the_reversed_table() -> None:
    """HF BERT's relative_key (transformers 4.x BertSelfAttention, typed here from its source:
    distance = position_ids_l - position_ids_r, row distance + max_position_embeddings - 1,
    scores (q kᵀ + einsum('bhld,lrd->bhlr', q, rows)) / sqrt(d)) is shaw_scores with the table
    flipped along its rows and K = max_position_embeddings - 1."""
    import posenc

    rng = np.random.default_rng(7)
    max_positions, seq, d = 6, 6, 4
    q, k = rng.standard_normal((2, 3, seq, d)), rng.standard_normal((2, 3, seq, d))
    table_bert = rng.standard_normal((2 * max_positions - 1, d))
    distance = np.arange(seq)[:, None] - np.arange(seq)[None, :]
    rows = table_bert[distance + max_positions - 1]
    bert = (q @ np.swapaxes(k, -1, -2) + np.einsum("bhld,lrd->bhlr", q, rows)) / math.sqrt(d)
    ours = posenc.shaw_scores(q, k, table_bert[::-1], max_relative_position=max_positions - 1)
    np.testing.assert_allclose(ours, bert, rtol=1e-13, atol=1e-13)
