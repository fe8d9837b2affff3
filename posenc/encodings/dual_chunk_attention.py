"""Dual Chunk Attention (Qwen2.5-1M, ChunkLlama): the rotary side. Queries and keys are rotated
by positions counted within chunks of ``L = chunk_size - local_size`` tokens, the query three
times: for keys of its own chunk, of the chunk before it, and of every earlier chunk."""

from __future__ import annotations

import operator
from typing import Any

from .. import array_api, params
from ..errors import ParameterError
from .rope import rope

__all__ = ["dual_chunk_attention"]


def _sizes(chunk_size: Any, local_size: Any) -> tuple[int, int]:
    chunk_size = params.size("chunk_size", chunk_size, minimum=2)
    local_size = params.size("local_size", local_size, minimum=0)
    if local_size >= chunk_size:
        raise ParameterError(
            f"local_size={local_size} must be < chunk_size={chunk_size}: the chunk length "
            f"chunk_size - local_size = {chunk_size - local_size} must be >= 1")
    return chunk_size, local_size


def _check(xp: Any, q: Any, k: Any, positions: Any) -> None:
    for name, x in (("q", q), ("k", k)):
        if not hasattr(x, "dtype") or x.ndim < 2:
            got = tuple(x.shape) if hasattr(x, "shape") else type(x).__name__
            raise ParameterError(f"{name} must be an array of shape [..., seq, dim], got {got}")
        array_api.check_floating(xp, name, x)
    if operator.index(q.shape[-2]) != operator.index(k.shape[-2]) or (
            operator.index(q.shape[-1]) != operator.index(k.shape[-1])):
        raise ParameterError(f"q has shape {tuple(q.shape)} and k {tuple(k.shape)}: they must "
                             "have the same seq and dim (the heads may differ)")
    if positions is not None and not xp.isdtype(positions.dtype, "integral"):
        raise ParameterError(f"positions must have an integer dtype, got "
                             f"{array_api.dtype_name(positions.dtype)}: chunks count whole tokens")


def dual_chunk_attention(
    q: Any, k: Any, positions: Any = None, *, chunk_size: int = 8192, local_size: int = 1024,
    base: float = 10000.0, layout: str = "half", rotary_dim: int | None = None,
    critical: bool = False,
) -> tuple[Any, Any, Any, Any]:
    """``(q_intra, q_succ, q_inter, k_embed)``: RoPE of ``q`` and ``k`` (``[..., seq, dim]``,
    the heads may differ) at Dual Chunk Attention's positions, with ``L = chunk_size -
    local_size`` (the keys of ``dual_chunk_attention_config``) and ``p`` the position
    (``positions``: ``[seq]`` or ``[batch, seq]`` integers >= 0, default ``arange(seq)``):

    - ``k_embed`` and ``q_intra`` at ``p mod L``: for the keys of the query's own chunk
      (tokens ``floor(p / L)·L .. p``);
    - ``q_succ`` at ``min(p mod L + L, chunk_size)``: for the keys of the chunk before;
    - ``q_inter`` at ``min(2L - 1, chunk_size)``, the same for every token: for the keys of
      all earlier chunks.

    Every query-key distance is then at most ``chunk_size``. ``critical=True`` gives vLLM's
    ``*_critical`` queries instead, unclamped (``q_succ`` at ``p mod L + L``, ``q_inter`` at
    ``p mod L + chunk_size``), which its sparse attention scores to pick the keys to keep.
    ``base``, ``layout`` (``"half"``: neox style, ``"interleaved"``: GPT-J style) and
    ``rotary_dim`` as in :func:`posenc.rope`.
    """
    xp = array_api.namespace(q=q, k=k, positions=positions)
    chunk_size, local_size = _sizes(chunk_size, local_size)
    critical = params.flag("critical", critical)
    if positions is not None and not hasattr(positions, "dtype"):  # a list, as rope takes
        positions = array_api.asarray(xp, positions, device=array_api.device_of(q))
    _check(xp, q, k, positions)
    if positions is None:
        device = array_api.device_of(q)
        seq = operator.index(q.shape[-2])
        positions = xp.arange(seq, device=device) if device is not None else xp.arange(seq)
    positions = array_api.at_least_int32(xp, positions)
    length = chunk_size - local_size
    within = xp.remainder(positions, length)
    if critical:
        succ, inter = within + length, within + chunk_size
    else:
        # where() rather than clip(): array-api-compat's torch clip calls isnan on the bound,
        # which torch.compile cannot trace (see posenc.learned)
        succ = within + length
        succ = xp.where(succ > chunk_size, xp.full_like(succ, chunk_size), succ)
        inter = xp.zeros_like(within) + min(2 * length - 1, chunk_size)

    def rotated(x: Any, at: Any) -> Any:
        return rope(x, at, base=base, layout=layout, rotary_dim=rotary_dim)

    return rotated(q, within), rotated(q, succ), rotated(q, inter), rotated(k, within)
