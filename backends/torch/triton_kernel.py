"""A fused rotary kernel in Triton: q and k in one launch, cos/sin computed in the kernel.

Each program takes ``BLOCK_S`` positions of one batch row and ``LOOP x BLOCK_H`` heads of q or
of k, computes the phases of its positions once, in float32 from exact pieces (the method of
:mod:`posenc.rotary`: frequency limbs, position split into ``high + low + fraction``,
every product exact and wrapped to ``[-1/2, 1/2]`` turn), and rotates its tile. No cos/sin
table is read: the only traffic is x in and the result out, which is what a memory-bound
kernel can hope for. The arithmetic runs in float32 whatever the storage dtype.

The module imports Triton; :mod:`posenc.backends.torch_triton` imports it (and registers the
kernel with ``torch.library``) when Triton is installed. ``TRITON_INTERPRET=1`` runs the same
kernel on CPU tensors (slowly), which is how the tests check it on a machine without a GPU.
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl


@triton.jit
def _wrap(t):
    # distance to a nearest integer; exact in float32 (t - n is representable)
    return t - tl.floor(t + 0.5)


@triton.jit
def _rotate(X, O, h, heads, s, s_ok, cos, sin, sx_h, sx_s, so_h, so_s,
            HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, TAIL: tl.constexpr,
            BLOCK_TAIL: tl.constexpr, INTERLEAVED: tl.constexpr, COPY_TAIL: tl.constexpr,
            BLOCK_S: tl.constexpr, BLOCK_H: tl.constexpr):
    """Rotate heads ``h`` (``[BLOCK_H]``) at positions ``s`` of X into O."""
    row_ok = (h < heads)[:, None, None] & s_ok[None, :, None]
    x_row = X + h[:, None, None] * sx_h + s[None, :, None] * sx_s
    o_row = O + h[:, None, None] * so_h + s[None, :, None] * so_s
    if INTERLEAVED:
        d = tl.arange(0, 2 * BLOCK_HALF)[None, None, :]
        ok = row_ok & (d < 2 * HALF)
        pairs = tl.load(x_row + d, mask=ok, other=0.0).to(tl.float32)
        x1, x2 = tl.split(tl.reshape(pairs, [BLOCK_H, BLOCK_S, BLOCK_HALF, 2]))
        y = tl.join(x1 * cos - x2 * sin, x2 * cos + x1 * sin)
        y = tl.reshape(y, [BLOCK_H, BLOCK_S, 2 * BLOCK_HALF])
        tl.store(o_row + d, y.to(O.dtype.element_ty), mask=ok)
    else:
        d = tl.arange(0, BLOCK_HALF)[None, None, :]
        ok = row_ok & (d < HALF)
        x1 = tl.load(x_row + d, mask=ok, other=0.0).to(tl.float32)
        x2 = tl.load(x_row + HALF + d, mask=ok, other=0.0).to(tl.float32)
        tl.store(o_row + d, (x1 * cos - x2 * sin).to(O.dtype.element_ty), mask=ok)
        tl.store(o_row + HALF + d, (x2 * cos + x1 * sin).to(O.dtype.element_ty), mask=ok)
    if COPY_TAIL:  # partial rotary, out of place: the features past rotary_dim pass through
        t = tl.arange(0, BLOCK_TAIL)[None, None, :]
        ok = row_ok & (t < TAIL)
        tail = tl.load(x_row + 2 * HALF + t, mask=ok, other=0.0)
        tl.store(o_row + 2 * HALF + t, tail, mask=ok)


@triton.jit
def _flag_outside(OK, outside):
    """Clear the call's 0-d ``OK`` flag when any position is outside the exact range (every
    writer stores the same 0: no race). The host asserts the flag on the device afterwards."""
    tl.store(OK, 0, mask=tl.max(outside.to(tl.int32), axis=0) > 0)


@triton.jit
def range_kernel(POS, OK, n, IS_FLOAT: tl.constexpr, BLOCK: tl.constexpr):
    """Clear ``OK`` when one of the ``n`` positions is outside float32's exact integers: the
    check an in-place rotation makes before it writes anything (the rotation is then gated
    on ``OK``), on the device, without a host read."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = i < n
    if IS_FLOAT:  # NaN and inf fail the comparison too
        p = tl.load(POS + i, mask=valid, other=0.0).to(tl.float32)
        _flag_outside(OK, valid & ~(tl.abs(p) <= 16777216.0))
    else:
        p = tl.load(POS + i, mask=valid, other=0)
        _flag_outside(OK, valid & ((p > 16777216) | (p < -16777216)))


@triton.jit
def rotary_kernel(
    Q, QO, K, KO, POS, LIMBS, SWITCH, OK,
    seq, heads_q, heads_k,
    sq_b, sq_h, sq_s, sqo_b, sqo_h, sqo_s,
    sk_b, sk_h, sk_s, sko_b, sko_h, sko_s,
    spos_b, factor, sign,
    HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, TAIL: tl.constexpr,
    BLOCK_TAIL: tl.constexpr, INTERLEAVED: tl.constexpr, POS_MODE: tl.constexpr,
    HAS_SWITCH: tl.constexpr, COPY_TAIL: tl.constexpr, CHECK_RANGE: tl.constexpr,
    GATED: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_H: tl.constexpr, LOOP: tl.constexpr,
):
    pid_s = tl.program_id(0)
    b = tl.program_id(1)
    pid_h = tl.program_id(2)
    q_programs = tl.cdiv(heads_q, BLOCK_H * LOOP)
    # which tensor this program rotates: q for the first head groups, then k
    if pid_h < q_programs:
        X, O, heads = Q + b * sq_b, QO + b * sqo_b, heads_q
        h0 = pid_h * BLOCK_H * LOOP
        sx_h, sx_s, so_h, so_s = sq_h, sq_s, sqo_h, sqo_s
    else:
        X, O, heads = K + b * sk_b, KO + b * sko_b, heads_k
        h0 = (pid_h - q_programs) * BLOCK_H * LOOP
        sx_h, sx_s, so_h, so_s = sk_h, sk_s, sko_h, sko_s

    s = pid_s * BLOCK_S + tl.arange(0, BLOCK_S)
    s_ok = s < seq
    if GATED:  # OK cleared by range_kernel: touch nothing
        s_ok = s_ok & (tl.load(OK + tl.zeros([BLOCK_S], dtype=tl.int32)) != 0)
    i = tl.arange(0, BLOCK_HALF)
    i_ok = i < HALF

    # -- phases of this block's positions, once for all its heads -------------------
    if POS_MODE == 0:
        whole = s.to(tl.float32)
        fraction = tl.zeros([BLOCK_S], dtype=tl.float32)
    elif POS_MODE == 1:
        p = tl.load(POS + b * spos_b + s, mask=s_ok, other=0)
        if CHECK_RANGE:  # float32 holds integers exactly up to 2^24: beyond, flag the call
            _flag_outside(OK, s_ok & ((p > 16777216) | (p < -16777216)))
        whole = p.to(tl.float32)
        fraction = tl.zeros([BLOCK_S], dtype=tl.float32)
    else:
        p = tl.load(POS + b * spos_b + s, mask=s_ok, other=0.0).to(tl.float32)
        if CHECK_RANGE:  # NaN and inf fail the comparison too
            _flag_outside(OK, s_ok & ~(tl.abs(p) <= 16777216.0))
        # 2^23 and beyond float32 has no fraction (and p + 0.5 would round)
        whole = tl.where(tl.abs(p) >= 8388608.0, p, tl.floor(p + 0.5))
        fraction = p - whole
    high = tl.floor(whole / 4096.0 + 0.5) * 4096.0  # as rotary.phases: 2^12 multiples
    low = whole - high
    limbs = LIMBS
    if HAS_SWITCH:  # LongRoPE: the long factors when max(positions) + 1 > L0 (device data)
        limbs = LIMBS + tl.load(SWITCH) * (3 * HALF)
    fa = tl.load(limbs + i, mask=i_ok, other=0.0)[None, :]
    fb = tl.load(limbs + HALF + i, mask=i_ok, other=0.0)[None, :]
    fc = tl.load(limbs + 2 * HALF + i, mask=i_ok, other=0.0)[None, :]
    high, low, fraction = high[:, None], low[:, None], fraction[:, None]
    turns = _wrap(_wrap(high * fa) + _wrap(low * fa))
    turns = _wrap(turns + _wrap(high * fb))
    turns = _wrap(turns + (low * fb + (high * fc + low * fc) + fraction * (fa + fb + fc)))
    angle = turns * 6.283185307179586
    cos = (tl.cos(angle) * factor)[None, :, :]
    sin = (tl.sin(angle) * (factor * sign))[None, :, :]

    # -- rotate LOOP x BLOCK_H heads (unrolled: the loads of every step can be in flight) ----
    for j in tl.static_range(LOOP):
        h = h0 + j * BLOCK_H + tl.arange(0, BLOCK_H)
        _rotate(X, O, h, heads, s, s_ok, cos, sin, sx_h, sx_s, so_h, so_s, HALF, BLOCK_HALF,
                TAIL, BLOCK_TAIL, INTERLEAVED, COPY_TAIL, BLOCK_S, BLOCK_H)


# Tile shape and warps; benchmarks/gpu/tune_rotary.py sweeps them on a GPU. A program computes
# the cos/sin of BLOCK_S positions once and rotates LOOP steps of BLOCK_H heads with them;
# "elements" is the size of one step's tile (BLOCK_H x BLOCK_S x rotary_dim).
# Measured on an H100 (bf16 Llama-3-8B q and k): 0.93 of the device-copy bandwidth at 4096
# tokens, 0.98 at 32768 and at 8 x 4096 (benchmarks/README.md).
CONFIG = {"block_h": 2, "loop": 4, "elements": 4096, "num_warps": 8}


def _next_power_of_2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def launch(run: Any, q: Any, q_out: Any, k: Any, k_out: Any, positions: Any, pos_mode: int,
           limbs: Any, switch: Any, *, rotary_dim: int, interleaved: bool, factor: float,
           inverse: bool, copy_tail: bool, ok: Any = None, gated: bool = False) -> None:
    """Rotate 4-D ``q`` ``[B, Hq, S, D]`` into ``q_out`` (and ``k`` ``[B, Hk, S, D]`` into
    ``k_out``; ``k`` may be None) in one launch of ``run`` (:func:`rotary_kernel`, or its
    ``torch.library.wrap_triton``). The last axis of every tensor must be contiguous.
    ``positions``: ``[1 or B, S]``, or None for ``arange(S)`` (``pos_mode`` 0); ``limbs``
    float32 ``[n_sets * 3 * rotary_dim/2]``; ``switch`` a 0-d int32 tensor choosing the set (None: the
    first). ``inverse`` rotates by ``-angle`` (the backward pass); ``copy_tail`` copies the
    features past ``rotary_dim`` (out of place); ``ok`` (a 0-d int32 tensor holding 1, or
    None) is cleared when a position lies outside float32's exact integers; with ``gated``
    it was set by :func:`range_kernel` instead, and the kernel writes nothing when it is 0."""
    batch, heads_q, seq, dim = (int(n) for n in q.shape)
    heads_k = 0 if k is None else int(k.shape[1])
    if k is None:
        k, k_out = q, q_out  # never read: no program is launched for k
    half = rotary_dim // 2
    tail = dim - rotary_dim
    block_half = _next_power_of_2(half)
    block_h = CONFIG["block_h"]
    block_s = max(1, min(64, CONFIG["elements"] // (2 * block_half * block_h)))
    group = block_h * CONFIG["loop"]
    grid = (-(-seq // block_s), batch, -(-heads_q // group) + -(-heads_k // group))
    spos_b = 0 if positions is None or positions.shape[0] == 1 else int(positions.stride(0))
    run[grid](
        q, q_out, k, k_out, q if positions is None else positions, limbs,
        limbs if switch is None else switch, limbs if ok is None else ok, seq, heads_q, heads_k,
        *(int(t.stride(i)) for t in (q, q_out, k, k_out) for i in range(3)),
        spos_b, float(factor), -1.0 if inverse else 1.0,
        HALF=half, BLOCK_HALF=block_half, TAIL=tail,
        BLOCK_TAIL=_next_power_of_2(max(tail, 1)), INTERLEAVED=interleaved,
        POS_MODE=pos_mode, HAS_SWITCH=switch is not None, COPY_TAIL=copy_tail and tail > 0,
        CHECK_RANGE=ok is not None and positions is not None and not gated,
        GATED=gated and ok is not None,
        BLOCK_S=block_s, BLOCK_H=block_h, LOOP=CONFIG["loop"],
        num_warps=CONFIG["num_warps"],
    )


def check_range(run: Any, positions: Any, ok: Any) -> None:
    """Clear the 0-d ``ok`` when a position is outside float32's exact integers, by ``run``
    (:func:`range_kernel`, or its ``torch.library.wrap_triton``): one launch over the positions
    (contiguous ``[1 or B, S]``), before a gated rotation."""
    n = int(positions.numel())
    block = min(1024, _next_power_of_2(n))
    run[(-(-n // block),)](positions, ok, n, IS_FLOAT=positions.dtype.is_floating_point,
                           BLOCK=block)
