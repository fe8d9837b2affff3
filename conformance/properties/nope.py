"""Properties of NoPE: the identity, so attention sees order only through a causal mask."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from posenc.reference.attention import attention

from ..context import CheckFailure, Context
from . import register

SEQ, DIM = 6, 8
SEEDS = st.integers(0, 2**31)
MIN_GAP = 1e-3  # relative; a causal mask moves outputs by O(0.1)


def _permutation(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    perm = rng.permutation(SEQ)
    while perm[0] == 0:  # the first token moves: under a causal mask its prefix changes
        perm = rng.permutation(SEQ)
    return perm


def _encoded(ctx: Context, x: np.ndarray) -> np.ndarray:
    """NoPE on the backend, positions arange(seq) (the slots, not the tokens, carry them)."""
    return ctx.run({"x": x, "positions": np.arange(x.shape[-2])})


def _attention(x: np.ndarray, causal: bool) -> np.ndarray:
    mask = np.tril(np.ones((SEQ, SEQ), bool)) if causal else None
    return attention(x, x, x, None, mask, scale=None)


@register("nope_is_identity")
def is_identity(ctx: Context) -> None:
    """nope(x, positions) is x bit for bit, whatever the positions (far ones, batched, none)."""

    @ctx.given(seed=SEEDS, top=st.sampled_from([8, 2**20]), batched=st.booleans())
    def check(seed: int, top: int, batched: bool) -> None:
        x = ctx.normal((2, SEQ, DIM), seed)
        shape = (2, SEQ) if batched else (SEQ,)
        positions = np.random.default_rng(seed).integers(0, top, size=shape)
        ctx.assert_equal(ctx.run({"x": x, "positions": positions}), x, "nope(x, positions)")
        ctx.assert_equal(ctx.run({"x": x, "positions": None}), x, "nope(x)")


@register("nope_attention_permutation_equivariant")
def attention_permutation_equivariant(ctx: Context) -> None:
    """Without a mask, attention over NoPE tokens is permutation-equivariant: permuting the
    tokens permutes the outputs ("dog bites man" = "man bites dog")."""

    @ctx.given(seed=SEEDS)
    def check(seed: int) -> None:
        x = ctx.normal((SEQ, DIM), seed)
        perm = _permutation(seed)
        y = _attention(_encoded(ctx, x), causal=False)
        y_perm = _attention(_encoded(ctx, x[perm]), causal=False)
        ctx.assert_close(y_perm, y[perm], f"attention(nope(P x)) vs P attention(nope(x)), "
                         f"P = {perm.tolist()}", scale=float(np.abs(x).max()))


@register("nope_causal_mask_reveals_order")
def causal_mask_reveals_order(ctx: Context) -> None:
    """With a causal mask, order becomes visible: permuting the tokens does not just permute
    the outputs, and the first token's output is its own value row (it attends to itself)."""

    @ctx.given(seed=SEEDS)
    def check(seed: int) -> None:
        x = ctx.normal((SEQ, DIM), seed)
        perm = _permutation(seed)
        encoded, encoded_perm = _encoded(ctx, x), _encoded(ctx, x[perm])
        ctx.assert_close(_attention(encoded, causal=True)[0], encoded[0],
                         "the first token under a causal mask attends only to itself",
                         scale=float(np.abs(x).max()))
        y = _attention(encoded, causal=True)[perm]
        y_perm = _attention(encoded_perm, causal=True)
        gap = np.abs(y_perm - y).max() / max(np.abs(y).max(), 1e-30)
        if gap < max(MIN_GAP, 4 * ctx.tol.rtol):
            raise CheckFailure(
                f"with a causal mask, attention over NoPE tokens is still permutation-"
                f"equivariant under {perm.tolist()} (relative difference {gap:.3e})")
