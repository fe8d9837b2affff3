"""Position-dependent query temperature: Llama 4's NoPE layers (over cache positions + 1),
Ministral 3's ``llama_4_scaling_beta`` (over position ids) and vLLM's Dual Chunk Attention
length temperature (over the sequence's length)."""

from __future__ import annotations

from typing import Any

from .. import array_api, params, validation
from ..errors import ParameterError

__all__ = ["query_temperature"]

FORMS = ("llama4", "ministral3", "dual_chunk")


_INPUTS = validation.Inputs("query_temperature", messages={
    "axis:seq": "{name} has shape {shape} but {first} has {first_size} entries: {name} must be "
                "[batch, {first_size}]"})


def query_temperature(
    cache_position: Any, position_ids: Any = None, *, form: str = "llama4",
    floor_scale: int = 8192, scale: float = 0.1, dtype: Any = None,
) -> Any:
    """The factor ``1 + scale·ln(1 + floor(p / floor_scale))`` that multiplies the queries.

    ``form="llama4"`` (Llama 4's NoPE layers): ``p = cache_position + 1`` (``[seq]``: the
    index of each query in the cache); given ``position_ids`` (``[batch, seq]``), the same row
    is broadcast to their shape and their values are ignored, as transformers does.
    ``form="ministral3"`` (Ministral 3, Mistral 4: ``floor_scale`` =
    ``original_max_position_embeddings``, ``scale`` = ``llama_4_scaling_beta``):
    ``p = position_ids`` (``cache_position`` when they are None). The step is integer
    arithmetic; the log runs in float32 (float64 for a float64 ``dtype``), the result has
    ``dtype`` (float32 by default). Multiply ``q[b, :, s, :]`` by ``out[b, s]`` (or ``out[s]``).

    ``form="dual_chunk"`` (vLLM's Dual Chunk Attention, Qwen2.5-1M: ``floor_scale`` =
    ``dual_chunk_attention_config['original_max_position_embeddings']``, ``scale`` 0.1):
    ``max(1, 1 + scale·ln(n / floor_scale))`` with ``n = max(cache_position) + 1``, the
    sequence's length (the whole prompt at prefill, the tokens so far at decode), the same for
    every token and broadcast to ``position_ids``' shape when given. vLLM multiplies the keys by
    it when it caches them and, at prefill, the softmax scale again (at decode the queries):
    see :func:`dual_chunk_attention`.
    """
    xp = array_api.namespace(cache_position=cache_position, position_ids=position_ids)
    if cache_position is None:
        raise ParameterError("cache_position must be an array of positions, got None")
    params.choice("form", form, FORMS)
    floor_scale = params.size("floor_scale", params.count("floor_scale", floor_scale), minimum=1)
    if isinstance(scale, bool) or not isinstance(scale, int | float):
        raise ParameterError(f"scale={scale!r} must be a number")
    scale = params.number("scale", scale)  # and finite
    out = array_api.output_dtype(xp, dtype, of="cache_position")
    compute = array_api.compute_dtype(xp, out)
    _INPUTS.check(xp, cache_position=cache_position, position_ids=position_ids)
    # the ids the temperature reads are >= 0 (the spec's convention) and exact integers
    read = {"llama4": (), "ministral3": ("position_ids",)}.get(form, ())
    for name, ids in (("cache_position", cache_position), ("position_ids", position_ids)):
        if ids is not None and (name == "cache_position" or name in read):
            array_api.assert_position_range(xp, ids, compute=xp.float64, name=name, low=0)
    if form == "dual_chunk":
        return xp.astype(_length_temperature(xp, cache_position, position_ids, floor_scale,
                                             scale, compute), out)
    if form == "llama4":
        ids, offset = cache_position, 1
    else:
        ids, offset = (cache_position if position_ids is None else position_ids), 0
    steps = xp.floor_divide(ids + offset, floor_scale)  # exact at any position
    temperature = xp.log1p(xp.astype(steps, compute)) * scale + 1.0
    if form == "llama4" and position_ids is not None:
        temperature = xp.broadcast_to(temperature[None, :], tuple(position_ids.shape))
    return xp.astype(temperature, out)


def _length_temperature(xp: Any, cache_position: Any, position_ids: Any, floor_scale: int,
                        scale: float, compute: Any) -> Any:
    shape = tuple(cache_position.shape if position_ids is None else position_ids.shape)
    if cache_position.shape[0] == 0:
        return xp.full(shape, 1.0, dtype=compute)  # (TensorFlow's adapter has no ones)
    length = xp.astype(xp.max(cache_position) + 1, compute)
    temperature = xp.log(length / floor_scale) * scale + 1.0
    temperature = xp.where(temperature > 1.0, temperature, xp.ones_like(temperature))
    return xp.broadcast_to(xp.reshape(temperature, (1,) * len(shape)), shape)
