"""Properties of ALiBi: the slope sequence and the structure of the bias forms."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..context import CheckFailure, Context
from ..tolerances import Tolerance
from . import register

# head counts where the composition rule matters (12, 40, 80 are where peers got it wrong)
HEADS = (1, 2, 3, 8, 12, 40, 80)


def _press_slopes(n: int, max_bias: float) -> np.ndarray:
    """Press et al.'s ``get_slopes`` recurrence (start * ratio**i), generalised to max_bias,
    in float64: an independent construction of the documented sequence."""

    def power_of_2(k: int) -> list[float]:
        start = 2.0 ** (-max_bias / k)
        return [start * start**i for i in range(k)]

    if math.log2(n).is_integer():
        return np.array(power_of_2(n))
    closest = 2 ** math.floor(math.log2(n))
    return np.concatenate([power_of_2(closest), _press_slopes(2 * closest, max_bias)[0::2][
        : n - closest]])


@register("alibi_slopes_sequence")
def slopes_sequence(ctx: Context) -> None:
    """For several head counts: the slopes equal Press's recurrence; a power-of-two count gives
    a geometric sequence starting at its own ratio 2**(-max_bias/n); other counts are the
    sequence of the next lower power of two followed by the odd powers of the sequence for
    twice that many heads; doubling max_bias squares every slope."""
    max_bias = float(ctx.params.get("max_bias", 8.0))
    for n in ctx.args.get("heads", HEADS):
        got = ctx.run({}, num_heads=n)
        if got.shape != (n,):
            raise CheckFailure(f"num_heads={n}: shape {got.shape}, expected ({n},)")
        ctx.assert_close(got, _press_slopes(n, max_bias), f"num_heads={n}: slopes vs get_slopes")
        closest = 2 ** math.floor(math.log2(n))
        first = 2.0 ** (-max_bias / closest)
        head = got[:closest]
        ctx.assert_close(head, first ** np.arange(1, closest + 1),
                         f"num_heads={n}: first {closest} slopes, geometric with ratio {first!r}")
        if closest > 1:
            ctx.assert_close(head[1:] / head[:-1], np.full(closest - 1, first),
                             f"num_heads={n}: ratios of consecutive slopes",
                             tol=ctx.tol.loosened(2.0))
        if n > closest:
            odd = (2.0 ** (-max_bias / (2 * closest))) ** np.arange(1, 2 * (n - closest), 2)
            ctx.assert_close(got[closest:], odd,
                             f"num_heads={n}: slopes after the first {closest}, odd powers of "
                             f"2**(-max_bias/{2 * closest})")
    n = ctx.args.get("squared_heads", 12)
    base = ctx.run({}, num_heads=n, max_bias=max_bias)
    doubled = ctx.run({}, num_heads=n, max_bias=2 * max_bias)
    ctx.assert_close(doubled, base**2, f"num_heads={n}: slopes(2*max_bias) vs slopes(max_bias)**2",
                     tol=ctx.tol.loosened(3.0))


def _positions(q_len: int, k_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Absolute query and key positions: queries are the last q_len of k_len (KV cache)."""
    return np.arange(k_len - q_len, k_len), np.arange(k_len)


@register("alibi_bias_relative")
def bias_relative(ctx: Context) -> None:
    """Causal and symmetric forms: the bias depends on the positions only through i - j (every
    diagonal is constant) and is linear in it: b(i, j) = b(distance 1) * (i - j) for causal,
    * |i - j| for symmetric, 0 on the diagonal i = j."""
    heads, q_len, k_len = 6, 5, 9
    out = ctx.run({}, num_heads=heads, q_len=q_len, k_len=k_len)
    if out.shape != (heads, q_len, k_len):
        raise CheckFailure(f"shape {out.shape}, expected {(heads, q_len, k_len)}")
    i, j = _positions(q_len, k_len)
    distance = i[:, None] - j[None, :]
    if ctx.params.get("form", "causal") == "symmetric":
        distance = np.abs(distance)
    for d in np.unique(distance):
        values = out[:, distance == d]  # [heads, entries at this distance]
        ctx.assert_close(values, np.broadcast_to(values[:, :1], values.shape),
                         f"entries at distance {d} differ (not a function of i - j)")
    unit = out[:, distance == 1][:, 0]  # b at distance 1, i.e. -slope
    if not np.all(unit < 0):
        raise CheckFailure(f"the bias at distance 1 must be negative (-slope), got {unit}")
    ctx.assert_close(out, unit[:, None, None] * distance[None], "bias vs b(1) * distance")


@register("alibi_causal_key_only_softmax")
def causal_key_only_softmax(ctx: Context) -> None:
    """Under a causal mask the causal and key-only forms give identical attention: the two
    differ by m_h * i, constant along each query row, and softmax ignores a row shift. The
    softmax is taken in float64 from the outputs; the tolerance allows for their rounding."""
    heads, q_len, k_len = 4, 5, 9
    causal = ctx.run({}, num_heads=heads, q_len=q_len, k_len=k_len, form="causal")
    key_only = ctx.run({}, num_heads=heads, q_len=q_len, k_len=k_len, form="key_only")
    if key_only.shape != (heads, 1, k_len):
        raise CheckFailure(f"key_only shape {key_only.shape}, expected {(heads, 1, k_len)}")
    i, j = _positions(q_len, k_len)
    allowed = j[None, :] <= i[:, None]

    def softmax(bias: np.ndarray) -> np.ndarray:
        logits = np.where(allowed, np.broadcast_to(bias, causal.shape), -np.inf)
        e = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    # each logit is off by at most rtol * |bias| after rounding to the dtype under test; a
    # logit error delta moves a probability by at most 2 * delta on either side
    worst = max(np.abs(causal).max(), np.abs(key_only).max())
    tol = Tolerance(ctx.dtype, rtol=0.0, atol=4 * ctx.tol.rtol * worst + ctx.tol.atol,
                    angle=0.0, reason="logit rounding")
    ctx.assert_close(softmax(key_only), softmax(causal), "softmax rows, key_only vs causal",
                     scale=1.0, tol=tol)


@register("alibi_symmetric")
def symmetric(ctx: Context) -> None:
    """The symmetric form is symmetric in i - j: for a square bias B[h] = B[h]ᵀ, and it equals
    the causal form wherever j <= i."""
    heads, n = 5, 7
    sym = ctx.run({}, num_heads=heads, q_len=n, k_len=n, form="symmetric")
    causal = ctx.run({}, num_heads=heads, q_len=n, k_len=n, form="causal")
    ctx.assert_close(sym, np.swapaxes(sym, -1, -2), "symmetric form vs its transpose")
    lower = np.tril(np.ones((n, n), dtype=bool))
    ctx.assert_close(sym[:, lower], causal[:, lower], "symmetric vs causal where j <= i")
    if np.any(sym > 0):
        raise CheckFailure("the symmetric bias must be <= 0 everywhere")


@register("alibi_kv_cache_alignment")
def kv_cache_alignment(ctx: Context) -> None:
    """Queries sit at the end of the keys: with q_len < k_len the rows equal the last q_len rows
    of the square bias (key_only: the same single row whatever q_len)."""
    heads, k_len = 3, 8
    square = ctx.run({}, num_heads=heads, q_len=k_len, k_len=k_len)
    for q_len in (1, 3):
        part = ctx.run({}, num_heads=heads, q_len=q_len, k_len=k_len)
        expected = square if square.shape[1] == 1 else square[:, k_len - q_len:]
        ctx.assert_close(part, expected, f"q_len={q_len} vs the last rows of q_len=k_len={k_len}")


@register("alibi_flex_score_mod")
def flex_score_mod(ctx: Context) -> None:
    """torch only: flex_attention with ``alibi_score_mod`` (the bias computed per score from
    the slopes, queries end-aligned) equals attention with the backend's materialised
    ``alibi_bias`` and the float64 reference, under the end-aligned causal mask for the causal
    and key_only forms; the score_mod holds O(heads) numbers (see conformance/flex.py)."""
    from ..tolerances import EPS
    from .flex_score_mods import check_score_mod

    cfg = {**ctx.spec.defaults(), **ctx.params}
    form, max_bias = cfg["form"], cfg["max_bias"]
    heads, q_len, k_len = 6, 10, 40  # 6 heads: slopes of 4 heads, then odd powers of 8's

    def build(make: Callable[..., Any], arrays: dict[str, Any], device: Any) -> Any:
        return make(heads, q_len, k_len, form=form, max_bias=max_bias, device=device)

    # slopes rounded to float32 times exact distances, rounded once more
    rounding = EPS["float64" if ctx.dtype == "float64" else "float32"]
    check_score_mod(ctx, name="alibi_score_mod", build=build, inputs={},
                    params={"num_heads": heads, "q_len": q_len, "k_len": k_len},
                    heads=heads, q_len=q_len, k_len=k_len,
                    query_offset=None if form == "symmetric" else k_len - q_len, scale=None,
                    flex_bias_rtol=rounding)


@register("alibi_falcon_order")
def falcon_order(ctx: Context) -> None:
    """head_dim d gives the bias over sqrt(d) (Falcon adds it before the 1/sqrt(d) scaling), for
    head widths whose root is exact (64, 256) or not (80, 128); the same bias for every d
    when k_len is 1 at position 0 (all zeros)."""
    heads, q_len, k_len = 6, 4, 7
    plain = ctx.run({}, num_heads=heads, q_len=q_len, k_len=k_len)
    for d in (64, 80, 128, 256):
        scaled = ctx.run({}, num_heads=heads, q_len=q_len, k_len=k_len, head_dim=d)
        if scaled.shape != plain.shape:
            raise CheckFailure(f"head_dim={d}: shape {scaled.shape}, expected {plain.shape}")
        ctx.assert_close(scaled * math.sqrt(d), plain, f"head_dim={d}: bias * sqrt({d}) vs the "
                         "bias without head_dim", tol=ctx.tol.loosened(2.0))
    zero = ctx.run({}, num_heads=heads, q_len=1, k_len=1, head_dim=80)
    if np.any(zero != 0):
        raise CheckFailure(f"one query at position 0: the bias must be 0, got {zero.ravel()}")
