"""FoPE, Fourier Position Embedding (Hua et al. 2024; Intern-S1-Pro through vLLM's
FourierRotaryEmbedding): every rotated pair's cos and sin become Fourier series over the kept
RoPE frequencies, with learned per-head coefficients, and the under-trained frequencies (a
period of at least the training length) are clipped to zero."""

from __future__ import annotations

import math
import operator
from typing import Any

from .. import array_api, params
from ..errors import ParameterError
from ..host_cache import host_cache
from ..rotary import rotation

__all__ = ["fope"]


@host_cache()
def kept_frequencies(dim: int, base: float, max_position_embeddings: int,
                     num_inv_freq: int | None) -> tuple[float, ...]:
    """``base^(-2i/dim)`` for ``i < dim/2``: the first ``num_inv_freq``, or (None) those above
    the floor ``2π / max_position_embeddings``; the others are clipped to frequency zero."""
    inv = [base ** (-2.0 * i / dim) for i in range(dim // 2)]
    if num_inv_freq is not None:
        return tuple(inv[:num_inv_freq])
    return tuple(w for w in inv if w > 2.0 * math.pi / max_position_embeddings)


def _check_coefficients(xp: Any, x: Any, heads: int, cos_coef: Any, sin_coef: Any,
                        kept: int, ladder: str, kept_by: str = "") -> int:
    """The number of coefficient heads (1 when shared), after the shapes are checked; ``heads``:
    the head count of ``x`` (1 without a heads axis)."""
    for name, coef in (("cos_coef", cos_coef), ("sin_coef", sin_coef)):
        if not hasattr(coef, "dtype"):
            raise ParameterError(f"{name} must be an array, got {type(coef).__name__}")
        array_api.check_floating(xp, name, coef)
        shape = tuple(operator.index(n) for n in coef.shape)
        if coef.ndim not in (2, 3) or shape[-2:] != (kept, kept):
            raise ParameterError(
                f"{name} has shape {shape}: it must be [kv_heads, {kept}, {kept}] or "
                f"[{kept}, {kept}], one row and one column per kept frequency ({kept} of "
                f"{ladder}){kept_by}")
    if tuple(cos_coef.shape) != tuple(sin_coef.shape):
        raise ParameterError(f"cos_coef has shape {tuple(cos_coef.shape)} but sin_coef "
                             f"{tuple(sin_coef.shape)}: they must match")
    if cos_coef.ndim == 2:
        return 1
    groups = operator.index(cos_coef.shape[0])
    if heads % groups:
        raise ParameterError(
            f"x has shape {tuple(x.shape)} but the coefficients have {groups} heads: x must "
            f"be [..., heads, seq, dim] with heads a multiple of {groups}")
    return groups


def _num_inv_freq(value: Any, ladder: int, partial: bool) -> int | None:
    if value is None:
        return None
    value = params.width("num_inv_freq", value, minimum=0)
    if value > ladder // 2:
        width = "rotary_dim" if partial else "x.shape[-1]"
        raise ParameterError(f"num_inv_freq={value} exceeds {width} / 2 = {ladder // 2}, the "
                             "number of RoPE frequencies")
    return value


def _rotary_dim(value: Any, dim: int) -> int:
    if value is None:
        return dim
    value = params.width("rotary_dim", value, minimum=2)
    if value % 2 or value > dim:
        raise ParameterError(f"rotary_dim={value} must be even and <= x.shape[-1]={dim}")
    return value


def _mixed_cos_sin(xp: Any, p: Any, omega: Any, cos_coef: Any, sin_coef: Any, *, seq: int,
                   half: int, batched: bool, integral: bool, device: Any) -> tuple[Any, Any]:
    """``C`` and ``S`` ``[(batch,) groups, seq, half]``: the kept frequencies' cos and sin mixed
    by the coefficients, then 1 and 0 (frequency zero) for the clipped pairs. ``p``: the
    positions ``[(batch,) seq, 1]`` in the compute dtype."""
    compute, kept = p.dtype, len(omega)
    if kept:
        angles = rotation.phases(xp, p, omega, compute=compute, device=device, integral=integral)
        if batched:  # [batch, seq, M] -> [batch, 1, seq, M] against the coefficient heads
            angles = angles[:, None, ...]
        a = xp.astype(cos_coef if cos_coef.ndim == 3 else cos_coef[None, ...], compute)
        b = xp.astype(sin_coef if sin_coef.ndim == 3 else sin_coef[None, ...], compute)
        cos = xp.matmul(xp.cos(angles), a)  # [(batch,) groups, seq, M]
        sin = xp.matmul(xp.sin(angles), b)
        pad = (*tuple(cos.shape[:-1]), half - kept)
        cos = xp.concat([cos, xp.full(pad, 1.0, dtype=compute, device=device)], axis=-1)
        sin = xp.concat([sin, xp.zeros(pad, dtype=compute, device=device)], axis=-1)
    else:  # every frequency clipped: the identity
        shape = (*tuple(p.shape[:-2]), 1, seq, half)
        if batched:
            shape = (p.shape[0], 1, seq, half)
        cos = xp.full(shape, 1.0, dtype=compute, device=device)
        sin = xp.zeros(shape, dtype=compute, device=device)
    return cos, sin


def fope(
    x: Any, cos_coef: Any, sin_coef: Any, positions: Any = None, *, base: float = 10000.0,
    max_position_embeddings: int = 4096, num_inv_freq: int | None = None,
    rotary_dim: int | None = None,
) -> Any:
    """FoPE of ``x`` (``[..., heads, seq, dim]``, queries or keys; same shape and dtype).

    The RoPE frequencies ``ω_i = base^(-2i/dim)`` above the floor ``2π /
    max_position_embeddings`` are kept (or the first ``num_inv_freq``), ``M`` of them; pair
    ``(j, j + dim/2)`` is rotated with ``C_j = Σ_i cos(p ω_i)·cos_coef[i, j]`` and ``S_j =
    Σ_i sin(p ω_i)·sin_coef[i, j]`` for ``j < M``, and with ``C_j = 1, S_j = 0`` (frequency
    zero: unchanged) for the clipped ``j >= M``: ``x'_j = x_j C_j - x_{j+dim/2} S_j``,
    ``x'_{j+dim/2} = x_{j+dim/2} C_j + x_j S_j``. ``cos_coef`` and ``sin_coef``: the
    checkpoint's ``[kv_heads, M, M]`` (one matrix per key head; query head ``h`` of ``heads``
    uses ``h // (heads / kv_heads)``) or one shared ``[M, M]``. Identity coefficients give
    RoPE with the clipped frequencies at zero. ``positions``: ``[seq]`` or ``[batch, seq]``
    (default ``arange(seq)``). ``rotary_dim`` (default ``dim``; vLLM's ``head_size *
    partial_rotary_factor``) sets the ladder only, ``ω_i = base^(-2i/rotary_dim)`` for ``i <
    rotary_dim/2``: the pairs stay ``(j, j + dim/2)`` across the whole head, and the pairs
    past the kept frequencies pass through, as in vLLM's FourierRotaryEmbedding.
    """
    xp = array_api.namespace(x=x, cos_coef=cos_coef, sin_coef=sin_coef, positions=positions)
    base = params.base(base)
    max_position_embeddings = params.size("max_position_embeddings",
                                             max_position_embeddings, minimum=1)
    device, positions = rotation.array_inputs(xp, x, positions)
    seq, dim = rotation.check_shapes(x, positions)
    if dim % 2:
        raise ParameterError(f"x.shape[-1]={dim} is odd: FoPE rotates pairs of features")
    half = dim // 2
    ladder = _rotary_dim(rotary_dim, dim)
    omega = kept_frequencies(ladder, base, max_position_embeddings,
                             _num_inv_freq(num_inv_freq, ladder, ladder != dim))
    kept = len(omega)
    batched = positions is not None and positions.ndim == 2
    has_heads = x.ndim >= (4 if batched else 3)  # x[b, ..., s, :] for positions [batch, seq]
    heads = operator.index(x.shape[-3]) if has_heads else 1
    width = "rotary_dim" if ladder != dim else "x.shape[-1]"
    groups = _check_coefficients(
        xp, x, heads, cos_coef, sin_coef, kept,
        f"{width} / 2 = {ladder // 2}",
        f"; kept by base={base!r}, max_position_embeddings={max_position_embeddings}, "
        f"num_inv_freq={num_inv_freq!r} and rotary_dim={rotary_dim!r}")
    compute = array_api.compute_dtype(xp, x.dtype)
    if positions is None:
        positions = xp.arange(seq, device=device) if device is not None else xp.arange(seq)
    else:
        if not xp.isdtype(positions.dtype, "integral"):  # vLLM's positions: token indices
            raise ParameterError(f"positions must have an integer dtype, got "
                                 f"{array_api.dtype_name(positions.dtype)}")
        array_api.assert_position_range(xp, positions, compute=compute)
    integral = xp.isdtype(positions.dtype, "integral")
    p = xp.astype(positions, compute)[..., None]
    cos, sin = _mixed_cos_sin(xp, p, omega, cos_coef, sin_coef, seq=seq, half=half,
                              batched=batched, integral=integral, device=device)
    # [(batch,) groups, seq, half] -> [(batch, 1...,) groups, 1, seq, half] against x split
    # into [..., groups, heads / groups, seq, dim]
    cos, sin = cos[..., None, :, :], sin[..., None, :, :]
    if batched and x.ndim > (4 if has_heads else 3):
        ones = [1] * (x.ndim - (4 if has_heads else 3))
        cos = xp.reshape(cos, (cos.shape[0], *ones, *tuple(cos.shape[1:])))
        sin = xp.reshape(sin, (sin.shape[0], *ones, *tuple(sin.shape[1:])))
    lead = tuple(x.shape[:-3]) if has_heads else tuple(x.shape[:-2])
    split = xp.reshape(x, (*lead, groups, heads // groups, seq, dim))
    out = rotation.apply_cos_sin(xp, split, cos, sin, rotary_dim=dim, layout="half")
    return xp.reshape(out, tuple(x.shape))
