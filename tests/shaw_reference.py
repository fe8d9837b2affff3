"""A second formulation of Shaw attention, tensor2tensor's materialised one (transcribed), and
the golden-case loader the Shaw oracle tests share."""

from __future__ import annotations

import math

import numpy as np

from posenc import golden
from posenc.catalog import specs
from posenc.specs import resolve_params


def t2t_rows(q_len: int, k_len: int, K: int) -> np.ndarray:
    """tensor2tensor's _generate_relative_positions_matrix (not cache mode), transcribed:
    range_vec_q = range_vec_k[-length_q:], distance = range_vec_k[None] - range_vec_q[:, None]."""
    range_vec_k = np.arange(k_len)
    range_vec_q = range_vec_k[k_len - q_len:]
    distance = range_vec_k[None, :] - range_vec_q[:, None]
    return np.clip(distance, -K, K) + K


def t2t_scores(q, k, table_k, K, scale):
    """_relative_attention_inner(q, k, relations_keys, transpose=True) with q pre-scaled."""
    relations_keys = table_k[t2t_rows(q.shape[-2], k.shape[-2], K)]  # [q_len, k_len, d]
    q = q * scale
    return q @ np.swapaxes(k, -1, -2) + np.einsum("...id,ijd->...ij", q, relations_keys)


def t2t_value_term(weights, table_v, K):
    """The relations_values half of _relative_attention_inner(weights, v, relations_values)."""
    relations_values = table_v[t2t_rows(weights.shape[-2], weights.shape[-1], K)]
    return np.einsum("...ij,ijd->...id", weights, relations_values)


def t2t_attention(q, k, v, table_k, table_v, mask, K, scale):
    scores = t2t_scores(q, k, table_k, K, scale)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
    total = weights.sum(axis=-1, keepdims=True)
    weights = weights / np.where(total == 0, 1.0, total)
    out = weights @ v
    return out if table_v is None else out + t2t_value_term(weights, table_v, K)


def golden_case(spec_id: str, name: str):
    spec = specs()[spec_id]
    case = golden.load(spec).cases[name]
    params = resolve_params(spec, case.params)
    scale = params["scale"] or 1.0 / math.sqrt(case.inputs["q"].shape[-1])
    return case, params["max_relative_position"], scale
