"""q/k projection-weight permutation between interleaved and half rotary layouts.

A checkpoint written for Meta's interleaved rope (pairs ``(2i, 2i+1)``; GGUF keeps this order)
runs under transformers' half rope (pairs ``(i, i + r/2)``) once the rows of each head's
rotary slice are regrouped evens first, then odds; the attention logits are unchanged, the
q/k tensors and the cached K are permuted. The permutation is a gather of static indices,
computed on the host.
"""

from __future__ import annotations

import operator
from typing import Any

from .. import array_api, params
from ..errors import ParameterError

__all__ = ["permute_qk", "qk_permutation_indices"]

LAYOUTS = ("half", "interleaved")
SLICES = ("first", "last")


def qk_permutation_indices(features: int, *, n_heads: int, to: str = "half",
                           rotary_dim: int | None = None,
                           rope_slice: str = "first") -> list[int]:
    """For each result row, the source row (``out[k] = w[index[k]]``) of a feature axis of
    ``features = n_heads * head_dim`` rows; see :func:`permute_qk`."""
    features = params.width("features", features, minimum=0)
    return _indices(features, f"features={features}", n_heads=n_heads, to=to,
                    rotary_dim=rotary_dim, rope_slice=rope_slice)


def _indices(features: int, rows: str, *, n_heads: int, to: str, rotary_dim: int | None,
             rope_slice: str) -> list[int]:
    """:func:`qk_permutation_indices`; ``rows`` names what the caller passed for the feature
    axis (``features=5``, ``w.shape[0]=5``), which the errors about head_dim quote."""
    n_heads = params.integer("n_heads", n_heads, minimum=1)
    params.choice("to", to, LAYOUTS)
    params.choice("rope_slice", rope_slice, SLICES)
    if features % n_heads:
        raise ParameterError(
            f"n_heads={n_heads} does not divide the feature axis ({features} rows): "
            f"head_dim would not be an integer ({rows})")
    head_dim = features // n_heads
    if rotary_dim is None:  # the whole head: an error names what gave its width
        if head_dim < 2 or head_dim % 2:
            raise ParameterError(
                f"{rows} over n_heads={n_heads} gives head_dim={head_dim}, "
                + ("which has no pair of rows to rotate" if head_dim < 2 else
                   "which is odd: rope rotates pairs of rows (give rotary_dim for a partial "
                   "rotary)"))
        rotary_dim = head_dim
    rotary_dim = params.width("rotary_dim", rotary_dim, minimum=2)
    if rotary_dim % 2:
        raise ParameterError(f"rotary_dim={rotary_dim} is odd: rope rotates pairs of rows")
    if rotary_dim > head_dim:
        raise ParameterError(f"rotary_dim={rotary_dim} exceeds head_dim={head_dim} "
                             f"({features} rows / n_heads={n_heads})")
    half = rotary_dim // 2
    offset = 0 if rope_slice == "first" else head_dim - rotary_dim
    if to == "half":  # result row j*r/2 + i <- source row 2i + j
        within = [2 * (k % half) + k // half for k in range(rotary_dim)]
    else:  # result row 2i + j <- source row j*r/2 + i
        within = [(k % 2) * half + k // 2 for k in range(rotary_dim)]
    index = list(range(features))
    for h in range(n_heads):
        start = h * head_dim + offset
        for k, source in enumerate(within):
            index[start + k] = start + source
    return index


def permute_qk(w: Any, *, n_heads: int, to: str = "half", rotary_dim: int | None = None,
               rope_slice: str = "first", axis: int = 0) -> Any:
    """Permute the rows of a q or k projection between rotary layouts, head by head.

    ``w``: a weight ``[n_heads*head_dim, hidden]`` (``axis=0``), a bias, or activations /
    a cached K with the features on ``axis`` (``-1``). ``to='half'`` turns a Meta/GGUF
    (interleaved) checkpoint into transformers' layout: a half-layout rope on the result gives
    the logits an interleaved rope gives on ``w``; ``to='interleaved'`` is the inverse
    (llama.cpp's HF -> GGUF). Permute q with ``num_attention_heads`` and k with
    ``num_key_value_heads`` (GQA). ``rotary_dim``: the rotary rows of each head (partial
    rotary), at its start (``rope_slice='first'``) or its end (``'last'``: DeepSeek's q_pe
    after q_nope). Errors name a head count or rotary width that does not divide.
    """
    if not hasattr(w, "shape"):
        raise ParameterError(f"w must be an array, got {type(w).__name__}")
    xp = array_api.namespace(w=w)
    if isinstance(axis, bool) or not isinstance(axis, int):
        try:
            axis = operator.index(axis)
        except TypeError:
            raise ParameterError(f"axis must be an int, got {axis!r}") from None
    ndim = len(tuple(w.shape))
    if not -ndim <= axis < ndim:
        raise ParameterError(f"axis={axis} is out of range for w with {ndim} dims")
    features = int(tuple(w.shape)[axis])
    index = _indices(features, f"w.shape[{axis}]={features}", n_heads=n_heads, to=to,
                     rotary_dim=rotary_dim, rope_slice=rope_slice)
    index_array = array_api.asarray(xp, index, dtype=xp.int64, device=array_api.device_of(w))
    return xp.take(w, index_array, axis=axis % ndim)
