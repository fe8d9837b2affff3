"""Multimodal rope position ids (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen2.5-Omni): the
(temporal, row, column) ids of a token sequence with image, video and audio groups, and the
rope_deltas that continue them while decoding. Vectorised: group starts, in-group offsets and
start positions come from cumulative sums and a searchsorted over the flattened batch, with no
loop over tokens."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import array_api, params
from ..errors import ParameterError
from .mrope_groups import (
    AUDIO,
    Omni,
    check_grids,
    check_groups,
    check_seconds,
    check_temporal_range,
    host,
)

__all__ = ["mrope_position_ids"]

ADVANCES = ("max_id", "max_hw")
CHUNK_ORDERS = ("video_audio", "audio_video")
OMNI_MODELS = ("qwen2_5_omni", "qwen3_omni")


def _clip(xp: Any, a: Any, high: int) -> Any:
    """``a`` clipped into ``[0, high]`` (array bounds: array-api-compat's clip with Python
    scalars breaks torch.compile's graph)."""
    return xp.maximum(xp.minimum(a, xp.full_like(a, high)), xp.zeros_like(a))


def _grid_columns(xp: Any, grid: Any, ordinal: Any, merge: int,
                  split: bool = False) -> tuple[Any, Any, Any]:
    """(t, h / merge, w / merge) of each token's group (ordinal clipped into the table);
    ``split``: group k is frame k of the videos in order (Qwen3-VL), each of t = 1."""
    if grid is None:
        zero = xp.zeros_like(ordinal)
        return zero + 1, zero + 1, zero + 1
    n = int(grid.shape[0])
    grid = xp.astype(grid, ordinal.dtype)
    if split:  # the video that frame `ordinal` belongs to
        frames = xp.cumulative_sum(grid[:, 0])
        ordinal = xp.astype(xp.searchsorted(frames, ordinal, side="right"), ordinal.dtype)
    index = _clip(xp, ordinal, max(n - 1, 0))
    rows = xp.take(grid, index, axis=0)
    t = xp.ones_like(rows[..., 0]) if split else rows[..., 0]
    return t, xp.floor_divide(rows[..., 1], merge), xp.floor_divide(rows[..., 2], merge)


def _check_params(tokens_per_second: float | None, split_video_frames: bool, advance: str,
                  position_id_per_seconds: float | None, use_audio_in_video: bool,
                  seconds_per_chunk: float, chunk_order: str, omni_model: str) -> Omni | None:
    """The scalar parameters; Qwen2.5-Omni's settings when position_id_per_seconds is given."""
    params.choice("advance", advance, ADVANCES)
    params.choice("chunk_order", chunk_order, CHUNK_ORDERS)
    params.choice("omni_model", omni_model, OMNI_MODELS)
    if tokens_per_second is not None and params.number("tokens_per_second",
                                                       tokens_per_second) <= 0:
        raise ParameterError(f"tokens_per_second={tokens_per_second!r} must be a positive number")
    if not isinstance(split_video_frames, bool):
        raise ParameterError(f"split_video_frames={split_video_frames!r} must be True or False")
    if not isinstance(use_audio_in_video, bool):
        raise ParameterError(f"use_audio_in_video={use_audio_in_video!r} must be True or False")
    if split_video_frames and tokens_per_second is not None:
        raise ParameterError(f"tokens_per_second={tokens_per_second!r} with split_video_frames: "
                             "Qwen3-VL's frames carry their time as timestamp text, not ids")
    if position_id_per_seconds is None:
        if use_audio_in_video:
            raise ParameterError("use_audio_in_video=True needs position_id_per_seconds "
                                 "(Qwen2.5-Omni's TMRoPE), got None")
        return None
    pps = params.positive("position_id_per_seconds", position_id_per_seconds)
    for name, value, bad in (("tokens_per_second", tokens_per_second, value_is_set),
                             ("split_video_frames", split_video_frames, bool),
                             ("advance", advance, lambda v: v != "max_id")):
        if bad(value):
            raise ParameterError(f"{name}={value!r} with position_id_per_seconds="
                                 f"{position_id_per_seconds!r}: Qwen2.5-Omni times videos by "
                                 "position_id_per_seconds and resumes after the largest id")
    chunk = pps * params.positive("seconds_per_chunk", seconds_per_chunk)
    if chunk >= 2**31:
        raise ParameterError(f"seconds_per_chunk={seconds_per_chunk!r} with position_id_per_seconds"
                             f"={position_id_per_seconds!r} gives {chunk:g} temporal ids a chunk, "
                             "past 2**31")
    per_chunk = int(chunk)
    if per_chunk < 1:
        raise ParameterError(f"seconds_per_chunk={seconds_per_chunk!r} gives "
                             f"int(position_id_per_seconds · seconds_per_chunk) = {per_chunk} "
                             "temporal ids a chunk; at least 1 is needed")
    if omni_model == "qwen3_omni" and chunk_order != "video_audio":
        raise ParameterError(f"chunk_order={chunk_order!r} with omni_model='qwen3_omni': "
                             "Qwen3-Omni merges a clip's video and audio on time, not in chunks")
    return Omni(pps, use_audio_in_video, per_chunk, chunk_order == "video_audio",
                omni_model == "qwen3_omni")


def value_is_set(value: Any) -> bool:
    return value is not None


def mrope_position_ids(
    token_types: Any, image_grid_thw: Any = None, video_grid_thw: Any = None,
    second_per_grid_ts: Any = None, attention_mask: Any = None, audio_lengths: Any = None, *,
    spatial_merge_size: int = 2, tokens_per_second: float | None = None,
    advance: str = "max_id", split_video_frames: bool = False,
    position_id_per_seconds: float | None = None, use_audio_in_video: bool = False,
    seconds_per_chunk: float = 2, chunk_order: str = "video_audio",
    omni_model: str = "qwen2_5_omni",
) -> tuple[Any, Any]:
    """``(position_ids [3, batch, seq], rope_deltas [batch, 1])`` of an M-RoPE model.

    ``token_types`` ``[batch, seq]``: 0 text, 1 image, 2 video, 3 audio (transformers'
    ``mm_token_type_ids``); consecutive tokens of one kind form a group, and each image
    (video) group takes the next row ``(t, h, w)`` of ``image_grid_thw`` (``video_grid_thw``),
    in order across the batch, with ``t·(h/m)·(w/m)`` tokens (``m = spatial_merge_size``).
    Text tokens count up on all three axes; a group starting at position ``p`` gets
    ``(p + ⌊i_t·τ⌋, p + i_h, p + i_w)``, τ = 1 (Qwen2-VL, images) or
    ``tokens_per_second · second_per_grid_ts[video]`` in float32 (Qwen2.5-VL videos). The
    next group starts at the largest id + 1 (``advance="max_id"``: Qwen2-VL's code,
    transformers 4.x, vLLM) or at ``p + max(h, w)/m`` (``"max_hw"``: transformers 5.x).
    ``split_video_frames`` (Qwen3-VL): each video row ``(t, h, w)`` stands for t groups of
    one frame ``(1, h, w)``, separated in the sequence by their timestamp text.
    ``attention_mask`` ``[batch, seq]``: padding is skipped and gets id 0.
    ``rope_deltas = max id + 1 - tokens``: decoding step ``s`` uses ``s + rope_deltas``.

    ``position_id_per_seconds`` (Qwen2.5-Omni's TMRoPE): temporal ids ``⌊i_t · pps⌋`` for
    images and ``⌊(i_t · second_per_grid_ts[video]) · pps⌋`` (float32) for videos; audio
    groups (``audio_lengths[k]`` tokens each) count up on all three axes. With
    ``use_audio_in_video`` a video and its audio form one clip: both start at the clip's
    ``p``, and the sequence lays them out in chunks of ``int(pps · seconds_per_chunk)``
    temporal ids, video chunk then audio chunk (``chunk_order``); each token keeps the id of
    its kind and rank, so the layout is only checked, never needed for the ids; a clip's
    (vision start, audio start) pair shares one id, and its (audio end, vision end) pair.
    ``omni_model="qwen3_omni"``: the clip's video and audio are merged token by token on
    their temporal ids (video first on a tie), its start and end pairs count up like text,
    and temporal ids must be whole (Qwen3-Omni keeps fractional ones unfloored)."""
    xp = array_api.namespace(token_types=token_types, image_grid_thw=image_grid_thw,
                       video_grid_thw=video_grid_thw, second_per_grid_ts=second_per_grid_ts,
                       attention_mask=attention_mask, audio_lengths=audio_lengths)
    arrays = {"token_types": token_types, "image_grid_thw": image_grid_thw,
              "video_grid_thw": video_grid_thw, "second_per_grid_ts": second_per_grid_ts,
              "attention_mask": attention_mask, "audio_lengths": audio_lengths}
    for name, value in arrays.items():
        if (value is not None or name == "token_types") \
                and not (hasattr(value, "shape") and hasattr(value, "dtype")):
            raise ParameterError(f"{name} must be an array, got {type(value).__name__} (the "
                                 "posenc.backends.<framework> functions convert lists)")
    merge = params.count("spatial_merge_size", spatial_merge_size)
    omni = _check_params(tokens_per_second, split_video_frames, advance, position_id_per_seconds,
                         use_audio_in_video, seconds_per_chunk, chunk_order, omni_model)
    if token_types.ndim != 2:
        raise ParameterError(f"token_types must be [batch, seq], got shape "
                             f"{tuple(token_types.shape)}")
    if not xp.isdtype(token_types.dtype, "integral"):
        raise ParameterError(f"token_types must be integers (0 text, 1 image, 2 video, 3 audio), "
                             f"got dtype {token_types.dtype}")
    batch, seq = int(token_types.shape[0]), int(token_types.shape[1])
    if not xp.isdtype(token_types.dtype, "signed integer"):  # kinds 0-3; the ids need -1
        token_types = xp.astype(token_types, xp.int32)
    token_types = array_api.at_least_int32(xp, token_types)
    if batch * seq == 0:
        raise ParameterError(f"token_types has shape {(batch, seq)}: no tokens to give ids")
    for name in ("image_grid_thw", "video_grid_thw", "audio_lengths", "attention_mask"):
        kinds = ("integral", "bool") if name == "attention_mask" else "integral"
        if arrays[name] is not None and not xp.isdtype(arrays[name].dtype, kinds):
            raise ParameterError(f"{name} must have an integer dtype, got "
                                 f"{array_api.dtype_name(arrays[name].dtype)}")
    if second_per_grid_ts is not None:
        videos = (None if video_grid_thw is None or video_grid_thw.ndim != 2
                  else int(video_grid_thw.shape[0]))
        if tuple(second_per_grid_ts.shape) != (videos,):
            raise ParameterError(
                f"second_per_grid_ts has shape {tuple(second_per_grid_ts.shape)} but "
                + ("there is no video_grid_thw" if videos is None
                   else f"video_grid_thw has {videos} rows") + ": one entry per video")
        if not xp.isdtype(second_per_grid_ts.dtype, ("real floating", "integral")):
            raise ParameterError(f"second_per_grid_ts must hold real numbers, got "
                                 f"{array_api.dtype_name(second_per_grid_ts.dtype)}")
    for name, grid in (("image_grid_thw", image_grid_thw), ("video_grid_thw", video_grid_thw)):
        if grid is not None and (grid.ndim != 2 or int(grid.shape[1]) != 3):
            raise ParameterError(f"{name} must be [n, 3] (t, h, w) rows, got shape "
                                 f"{tuple(grid.shape)}")
    if audio_lengths is not None and audio_lengths.ndim != 1:
        raise ParameterError(f"audio_lengths must be [n_audios], got shape "
                             f"{tuple(audio_lengths.shape)}")
    if attention_mask is not None and tuple(attention_mask.shape) != (batch, seq):
        raise ParameterError(f"attention_mask has shape {tuple(attention_mask.shape)} but "
                             f"token_types has shape {(batch, seq)}")
    host_types = host(token_types)
    if host_types is not None:
        kinds = (0, 1, 2, 3) if omni else (0, 1, 2)
        if not np.isin(host_types, kinds).all():
            bad = int(host_types[~np.isin(host_types, kinds)][0])
            raise ParameterError(f"token_types contains {bad}: 0 text, 1 image, 2 video" + (
                ", 3 audio" if omni else "" if bad != AUDIO else
                " (3 audio needs position_id_per_seconds: Qwen2.5-Omni)"))
        mask = None if attention_mask is None else host(attention_mask)
        videos = video_grid_thw
        if split_video_frames and video_grid_thw is not None:
            rows = host(video_grid_thw)
            videos = None if rows is None else np.array(
                [[1, h, w] for t, h, w in rows.tolist() for _ in range(t)]).reshape(-1, 3)
        seconds = (None if second_per_grid_ts is None  # bfloat16 has no NumPy view
                   else host(xp.astype(second_per_grid_ts, xp.float32)))
        check_seconds(seconds)
        check_grids({"image_grid_thw": image_grid_thw, "video_grid_thw": video_grid_thw})
        check_temporal_range(video_grid_thw, seconds, tokens_per_second, omni)
        check_groups(host_types, mask, {1: image_grid_thw, 2: videos}, merge,
                     audio_lengths if omni else None, seconds, omni)

    index = token_types.dtype
    device = array_api.device_of(token_types)

    def zeros(n: int) -> Any:
        return array_api.asarray(xp, [0] * n, dtype=index, device=device)
    types = xp.reshape(token_types, (batch * seq,))
    valid = (xp.ones_like(types) if attention_mask is None
             else xp.astype(xp.astype(xp.reshape(attention_mask, (batch * seq,)), index) != 0,
                            index))
    # a clip's audio groups with its video: one group of class video
    cls = (xp.where(types == AUDIO, xp.full_like(types, 2), types)
           if omni is not None and omni.use_audio_in_video else types)
    rows = array_api.asarray(xp, list(range(batch)), dtype=index, device=device)
    row = xp.reshape(xp.broadcast_to(xp.reshape(rows, (batch, 1)),
                                     (batch, seq)), (batch * seq,))
    count = xp.cumulative_sum(valid)  # valid tokens up to and including each, over the batch
    row_start = xp.take(xp.concat([zeros(1), count[:-1]]),
                        row * seq)  # valid tokens before the row
    in_row = count - row_start  # 1-based rank of a valid token within its row
    # the previous valid token: the first whose running count reaches this one's count - 1
    valid_positions = xp.cumulative_sum(valid) - valid  # valid tokens before each (global)
    previous = xp.searchsorted(count, valid_positions, side="left")  # the index of that token
    previous = _clip(xp, previous, batch * seq - 1)
    prev_cls = xp.where(in_row == 1, xp.full_like(types, -1), xp.take(cls, previous))
    start = xp.astype((valid != 0) & (cls != prev_cls), index)

    key = xp.cumulative_sum(start)  # nondecreasing over the flattened batch
    first = xp.searchsorted(key, key, side="left")  # flat index of each group's first token
    offset = count - xp.take(count, first)  # the in-group index (valid tokens only)

    def rank(mine: Any) -> Any:
        """Among the group's tokens of one kind, how many come before each."""
        before = xp.cumulative_sum(mine) - mine
        return before - xp.take(before, first)
    is_audio = xp.astype((valid != 0) & (types == AUDIO), index)
    is_video_token = xp.astype((valid != 0) & (types == 2), index)

    kind = xp.take(cls, first)
    clips = omni is not None and omni.use_audio_in_video
    if clips:  # a run of class video without video tokens is an audio group
        last = xp.searchsorted(key, key, side="right") - 1

        def in_group(mine: Any) -> Any:
            before = xp.cumulative_sum(mine) - mine
            return xp.take(before + mine, last) - xp.take(before, first)
        clip_audio = in_group(is_audio)
        kind = xp.where((kind == 2) & (in_group(is_video_token) == 0),
                        xp.full_like(kind, AUDIO), kind)
    ordinals = {k: xp.take(xp.cumulative_sum(start * xp.astype(kind == k, index)), first) - 1
                for k in (1, 2)}
    t_i, h_i, w_i = _grid_columns(xp, image_grid_thw, ordinals[1], merge)
    t_v, h_v, w_v = _grid_columns(xp, video_grid_thw, ordinals[2], merge,
                                  split=bool(split_video_frames))
    is_video = kind == 2
    t = xp.where(is_video, t_v, t_i)
    h = xp.where(is_video, h_v, h_i)
    w = xp.where(is_video, w_v, w_i)

    f32 = xp.float32
    interval = xp.astype(xp.ones_like(types), f32)
    scaled = omni is not None or tokens_per_second is not None
    if scaled and video_grid_thw is not None:
        seconds = (array_api.asarray(xp, [1.0] * int(video_grid_thw.shape[0]), dtype=f32,
                               device=device)
                   if second_per_grid_ts is None else xp.astype(second_per_grid_ts, f32))
        per_video = xp.take(seconds, _clip(xp, ordinals[2], int(seconds.shape[0]) - 1))
        if omni is None:
            per_video = per_video * float(tokens_per_second)
        interval = xp.where(is_video, per_video, interval)

    def temporal(i: Any) -> Any:
        if omni is None:
            return xp.astype(xp.floor(xp.astype(i, f32) * interval), index)
        # (arange(t) · second_per_grid) · position_id_per_seconds, in float32 (images: 1 s)
        return xp.astype(xp.floor((xp.astype(i, f32) * interval)
                                  * omni.position_id_per_seconds), index)

    vision = (kind == 1) | (kind == 2)
    grid_token = (types == 1) | (types == 2)
    # a clip's video tokens are ranked among its video tokens, its audio among its audio
    vision_offset = xp.where(types == 2, rank(is_video_token), offset)
    linear = xp.where(types == AUDIO, rank(is_audio), offset)
    hw = h * w
    step_t, step_h, step_w = (xp.floor_divide(vision_offset, hw), xp.remainder(
        xp.floor_divide(vision_offset, w), h), xp.remainder(vision_offset, w))
    if advance == "max_hw":
        jump = xp.maximum(h, w)
    else:
        jump = xp.maximum(xp.maximum(temporal(t - 1), h - 1), w - 1) + 1
        if clips:  # past the clip's audio too
            jump = xp.maximum(jump, clip_audio)
    advance_by = xp.where(vision, jump * start, valid)
    if clips and not omni.time_merge:  # Qwen2.5-Omni: a clip's start pair shares one id,
        # and its end pair
        text = (valid != 0) & (types == 0)
        two_on = _clip(xp, xp.searchsorted(count, count + 2, side="left"), batch * seq - 1)
        before_clip = (text & (xp.take(kind, two_on) == 2) & (xp.take(start, two_on) != 0)
                       & (xp.take(row, two_on) == row) & (xp.take(count, two_on) == count + 2))
        after_clip = text & (in_row > 1) & (xp.take(kind, previous) == 2)
        advance_by = xp.where(before_clip | after_clip, xp.zeros_like(advance_by), advance_by)
    before = xp.cumulative_sum(advance_by) - advance_by  # over the batch: subtract the row's
    row_before = xp.take(xp.concat([zeros(1),
                                    xp.cumulative_sum(advance_by)[:-1]]), row * seq)
    group_start = xp.take(before, first) - row_before
    zero = xp.zeros_like(types)
    # text from the advance (a clip's start and end pairs share ids), audio by its rank
    linear = xp.where(types == AUDIO, group_start + linear, before - row_before)
    ids = [xp.where(grid_token, group_start + part, linear)
           for part in (temporal(step_t), step_h, step_w)]
    ids = [xp.where(valid != 0, i, zero) for i in ids]
    position_ids = xp.reshape(xp.stack(ids), (3, batch, seq))
    largest = xp.max(xp.reshape(xp.stack(ids), (3, batch, seq)), axis=(0, 2))
    tokens = xp.sum(xp.reshape(valid, (batch, seq)), axis=1)
    return position_ids, xp.reshape(largest + 1 - tokens, (batch, 1))
