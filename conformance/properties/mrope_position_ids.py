"""Properties of the M-RoPE position-id builder: text alone counts up, and rope_deltas continue
the ids of a prompt while decoding."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ..context import Context
from . import register


def _split(out: np.ndarray, batch: int, seq: int) -> tuple[np.ndarray, np.ndarray]:
    n = 3 * batch * seq
    return out[:n].reshape(3, batch, seq), out[n:].reshape(batch, 1)


@register("mrope_ids_text_counts_up")
def text_counts_up(ctx: Context) -> None:
    """A text-only batch gets ids arange over its unmasked tokens on all three axes (left
    padding 0) and rope_deltas 0."""

    @ctx.given(seq=st.integers(1, 40), pad=st.integers(0, 39))
    def check(seq: int, pad: int) -> None:
        pad = min(pad, seq - 1)
        mask = np.ones((2, seq), np.int64)
        mask[1, :pad] = 0
        out = ctx.run({"token_types": np.zeros((2, seq), np.int64), "attention_mask": mask})
        ids, deltas = _split(out, 2, seq)
        expected = np.stack([np.arange(seq), np.concatenate([np.zeros(pad),
                                                             np.arange(seq - pad)])])
        ctx.assert_equal(ids, np.broadcast_to(expected, (3, 2, seq)), f"text ids, pad {pad}")
        ctx.assert_equal(deltas, np.zeros((2, 1)), "rope_deltas of text")


@register("mrope_ids_deltas_continue_decoding")
def deltas_continue_decoding(ctx: Context) -> None:
    """After a prompt with one image of (h, w) patches, rope_deltas = largest id + 1 - tokens,
    and appending text tokens to the prompt gives them cache position + rope_deltas, exactly
    what decoding with the deltas uses."""
    merge = int(ctx.params.get("spatial_merge_size", 2))

    @ctx.given(before=st.integers(0, 5), h=st.integers(1, 6), w=st.integers(1, 6),
               after=st.integers(1, 5))
    def check(before: int, h: int, w: int, after: int) -> None:
        n = h * w
        prompt = [0] * before + [1] * n
        types = np.array([prompt + [0] * after])
        grid = np.array([[1, h * merge, w * merge]])
        out = ctx.run({"token_types": types[:, :len(prompt)], "image_grid_thw": grid})
        _, deltas = _split(out, 1, len(prompt))
        largest = before + max(h, w) - 1 if n else before - 1
        ctx.assert_equal(deltas, np.array([[largest + 1 - len(prompt)]]), "rope_deltas")
        full = ctx.run({"token_types": types, "image_grid_thw": grid})
        ids, _ = _split(full, 1, types.shape[1])
        cache = np.arange(len(prompt), types.shape[1])
        ctx.assert_equal(ids[:, 0, len(prompt):], np.broadcast_to(cache + deltas[0, 0],
                                                                  (3, after)),
                         "text after the prompt vs cache position + rope_deltas")
