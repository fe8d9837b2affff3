"""Multimodal rope position ids (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen2.5-Omni): the
(temporal, row, column) ids of a token sequence with image, video and audio groups, and the
rope_deltas that continue them while decoding. Vectorised: group starts, in-group offsets and
start positions come from cumulative sums and a searchsorted over the flattened batch, with no
loop over tokens."""

from __future__ import annotations

from dataclasses import dataclass
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
    _require_arrays(arrays)
    merge = params.count("spatial_merge_size", spatial_merge_size)
    omni = _check_params(tokens_per_second, split_video_frames, advance, position_id_per_seconds,
                         use_audio_in_video, seconds_per_chunk, chunk_order, omni_model)
    arrays["token_types"] = _check_token_types(xp, token_types)
    _check_companions(xp, arrays)
    _check_on_host(xp, arrays, merge, split_video_frames, tokens_per_second, omni)
    tokens = _segment(xp, arrays["token_types"], attention_mask, omni)
    return _assemble(tokens, arrays, merge=merge, tokens_per_second=tokens_per_second,
                     advance=advance, split_video_frames=split_video_frames, omni=omni)


# -- validation ---------------------------------------------------------------------------

def _require_arrays(arrays: dict[str, Any]) -> None:
    for name, value in arrays.items():
        if (value is not None or name == "token_types") \
                and not (hasattr(value, "shape") and hasattr(value, "dtype")):
            raise ParameterError(f"{name} must be an array, got {type(value).__name__} (the "
                                 "posenc.backends.<framework> functions convert lists)")


def _check_token_types(xp: Any, token_types: Any) -> Any:
    """``token_types`` checked to be a non-empty ``[batch, seq]`` of integers, as a signed
    integer array of at least 32 bits."""
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
    return token_types


def _check_companions(xp: Any, arrays: dict[str, Any]) -> None:
    """The dtypes and shapes of the arrays beside ``token_types``."""
    batch, seq = (int(n) for n in arrays["token_types"].shape)
    for name in ("image_grid_thw", "video_grid_thw", "audio_lengths", "attention_mask"):
        kinds = ("integral", "bool") if name == "attention_mask" else "integral"
        if arrays[name] is not None and not xp.isdtype(arrays[name].dtype, kinds):
            raise ParameterError(f"{name} must have an integer dtype, got "
                                 f"{array_api.dtype_name(arrays[name].dtype)}")
    seconds, video_grid_thw = arrays["second_per_grid_ts"], arrays["video_grid_thw"]
    if seconds is not None:
        videos = (None if video_grid_thw is None or video_grid_thw.ndim != 2
                  else int(video_grid_thw.shape[0]))
        if tuple(seconds.shape) != (videos,):
            raise ParameterError(
                f"second_per_grid_ts has shape {tuple(seconds.shape)} but "
                + ("there is no video_grid_thw" if videos is None
                   else f"video_grid_thw has {videos} rows") + ": one entry per video")
        if not xp.isdtype(seconds.dtype, ("real floating", "integral")):
            raise ParameterError(f"second_per_grid_ts must hold real numbers, got "
                                 f"{array_api.dtype_name(seconds.dtype)}")
    for name in ("image_grid_thw", "video_grid_thw"):
        grid = arrays[name]
        if grid is not None and (grid.ndim != 2 or int(grid.shape[1]) != 3):
            raise ParameterError(f"{name} must be [n, 3] (t, h, w) rows, got shape "
                                 f"{tuple(grid.shape)}")
    audio_lengths, attention_mask = arrays["audio_lengths"], arrays["attention_mask"]
    if audio_lengths is not None and audio_lengths.ndim != 1:
        raise ParameterError(f"audio_lengths must be [n_audios], got shape "
                             f"{tuple(audio_lengths.shape)}")
    if attention_mask is not None and tuple(attention_mask.shape) != (batch, seq):
        raise ParameterError(f"attention_mask has shape {tuple(attention_mask.shape)} but "
                             f"token_types has shape {(batch, seq)}")


def _check_on_host(xp: Any, arrays: dict[str, Any], merge: int, split_video_frames: bool,
                   tokens_per_second: float | None, omni: Omni | None) -> None:
    """The checks that read values: the token kinds and the groups against the grids (skipped
    where the values are not on the host, e.g. traced)."""
    host_types = host(arrays["token_types"])
    if host_types is None:
        return
    kinds = (0, 1, 2, 3) if omni else (0, 1, 2)
    if not np.isin(host_types, kinds).all():
        bad = int(host_types[~np.isin(host_types, kinds)][0])
        raise ParameterError(f"token_types contains {bad}: 0 text, 1 image, 2 video" + (
            ", 3 audio" if omni else "" if bad != AUDIO else
            " (3 audio needs position_id_per_seconds: Qwen2.5-Omni)"))
    image_grid_thw, video_grid_thw = arrays["image_grid_thw"], arrays["video_grid_thw"]
    mask = None if arrays["attention_mask"] is None else host(arrays["attention_mask"])
    videos = video_grid_thw
    if split_video_frames and video_grid_thw is not None:
        rows = host(video_grid_thw)
        videos = None if rows is None else np.array(
            [[1, h, w] for t, h, w in rows.tolist() for _ in range(t)]).reshape(-1, 3)
    seconds = (None if arrays["second_per_grid_ts"] is None  # bfloat16 has no NumPy view
               else host(xp.astype(arrays["second_per_grid_ts"], xp.float32)))
    check_seconds(seconds)
    check_grids({"image_grid_thw": image_grid_thw, "video_grid_thw": video_grid_thw})
    check_temporal_range(video_grid_thw, seconds, tokens_per_second, omni)
    check_groups(host_types, mask, {1: image_grid_thw, 2: videos}, merge,
                 arrays["audio_lengths"] if omni else None, seconds, omni)


# -- segmentation: the flattened batch cut into groups ------------------------------------

@dataclass(frozen=True)
class _Tokens:
    """The batch flattened to ``[batch * seq]`` and cut into groups (runs of one class)."""

    xp: Any
    batch: int
    seq: int
    types: Any  # each token's kind
    valid: Any  # 1 where attended, 0 for padding (index dtype)
    cls: Any  # the kind that makes groups: a clip's audio counts as video
    row: Any  # each token's batch row
    count: Any  # valid tokens up to and including each, over the batch
    in_row: Any  # 1-based rank of a valid token within its row
    previous: Any  # the flat index of the previous valid token
    start: Any  # 1 on each group's first token
    key: Any  # the group number, nondecreasing over the flattened batch
    first: Any  # the flat index of each token's group's first token
    offset: Any  # the in-group index (valid tokens only)

    @property
    def index(self) -> Any:
        return self.types.dtype

    def zeros(self, n: int) -> Any:
        return array_api.asarray(self.xp, [0] * n, dtype=self.index,
                                 device=array_api.device_of(self.types))

    def rank(self, mine: Any) -> Any:
        """Among the group's tokens of one kind, how many come before each."""
        before = self.xp.cumulative_sum(mine) - mine
        return before - self.xp.take(before, self.first)

    def in_group(self, mine: Any) -> Any:
        """How many of the group's tokens are of one kind."""
        xp = self.xp
        last = xp.searchsorted(self.key, self.key, side="right") - 1
        before = xp.cumulative_sum(mine) - mine
        return xp.take(before + mine, last) - xp.take(before, self.first)

    def mine(self, kind: int) -> Any:
        """1 on the valid tokens of ``kind``."""
        return self.xp.astype((self.valid != 0) & (self.types == kind), self.index)


def _segment(xp: Any, token_types: Any, attention_mask: Any, omni: Omni | None) -> _Tokens:
    batch, seq = int(token_types.shape[0]), int(token_types.shape[1])
    index, device = token_types.dtype, array_api.device_of(token_types)
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
    count = xp.cumulative_sum(valid)
    zero = array_api.asarray(xp, [0], dtype=index, device=device)
    row_start = xp.take(xp.concat([zero, count[:-1]]), row * seq)  # valid tokens before the row
    in_row = count - row_start
    # the previous valid token: the first whose running count reaches this one's count - 1
    valid_positions = xp.cumulative_sum(valid) - valid  # valid tokens before each (global)
    previous = _clip(xp, xp.searchsorted(count, valid_positions, side="left"), batch * seq - 1)
    prev_cls = xp.where(in_row == 1, xp.full_like(types, -1), xp.take(cls, previous))
    start = xp.astype((valid != 0) & (cls != prev_cls), index)
    key = xp.cumulative_sum(start)
    first = xp.searchsorted(key, key, side="left")
    offset = count - xp.take(count, first)
    return _Tokens(xp, batch, seq, types, valid, cls, row, count, in_row, previous, start, key,
                   first, offset)


# -- assembly -----------------------------------------------------------------------------

def _group_kinds(tokens: _Tokens, omni: Omni | None) -> tuple[Any, Any]:
    """``(kind, clip_audio)``: each token's group kind, and with clips the audio tokens of its
    group (None without clips)."""
    xp = tokens.xp
    kind = xp.take(tokens.cls, tokens.first)
    if not (omni is not None and omni.use_audio_in_video):
        return kind, None
    # a run of class video without video tokens is an audio group
    clip_audio = tokens.in_group(tokens.mine(AUDIO))
    kind = xp.where((kind == 2) & (tokens.in_group(tokens.mine(2)) == 0),
                    xp.full_like(kind, AUDIO), kind)
    return kind, clip_audio


def _group_grids(tokens: _Tokens, kind: Any, arrays: dict[str, Any], merge: int,
                 split_video_frames: bool) -> tuple[tuple[Any, Any, Any], Any]:
    """``((t, h, w), video_ordinal)``: the grid of each token's group (1 for text) and the
    ordinal of its video."""
    xp = tokens.xp
    ordinals = {k: xp.take(xp.cumulative_sum(tokens.start * xp.astype(kind == k, tokens.index)),
                           tokens.first) - 1 for k in (1, 2)}
    image = _grid_columns(xp, arrays["image_grid_thw"], ordinals[1], merge)
    video = _grid_columns(xp, arrays["video_grid_thw"], ordinals[2], merge,
                          split=bool(split_video_frames))
    is_video = kind == 2
    thw = tuple(xp.where(is_video, v, i) for v, i in zip(video, image, strict=True))
    return thw, ordinals[2]


def _temporal(tokens: _Tokens, is_video: Any, video_ordinal: Any, arrays: dict[str, Any],
              tokens_per_second: float | None, omni: Omni | None) -> Any:
    """The temporal id of in-group frame indices: ``temporal(i)``."""
    xp, index, f32 = tokens.xp, tokens.index, tokens.xp.float32
    interval = xp.astype(xp.ones_like(tokens.types), f32)
    video_grid_thw, second_per_grid_ts = arrays["video_grid_thw"], arrays["second_per_grid_ts"]
    if (omni is not None or tokens_per_second is not None) and video_grid_thw is not None:
        seconds = (array_api.asarray(xp, [1.0] * int(video_grid_thw.shape[0]), dtype=f32,
                                     device=array_api.device_of(tokens.types))
                   if second_per_grid_ts is None else xp.astype(second_per_grid_ts, f32))
        per_video = xp.take(seconds, _clip(xp, video_ordinal, int(seconds.shape[0]) - 1))
        if omni is None:
            per_video = per_video * float(tokens_per_second)
        interval = xp.where(is_video, per_video, interval)

    def temporal(i: Any) -> Any:
        if omni is None:
            return xp.astype(xp.floor(xp.astype(i, f32) * interval), index)
        # (arange(t) · second_per_grid) · position_id_per_seconds, in float32 (images: 1 s)
        return xp.astype(xp.floor((xp.astype(i, f32) * interval)
                                  * omni.position_id_per_seconds), index)
    return temporal


def _advance_by(tokens: _Tokens, kind: Any, jump: Any, omni: Omni | None) -> Any:
    """How far each token moves the next id: a group's jump on its first token, 1 per text
    token, 0 for padding and for the text pairs that share a clip's ids (Qwen2.5-Omni)."""
    xp, t = tokens.xp, tokens
    advance_by = xp.where((kind == 1) | (kind == 2), jump * t.start, t.valid)
    if omni is None or not omni.use_audio_in_video or omni.time_merge:
        return advance_by
    # Qwen2.5-Omni: a clip's start pair shares one id, and its end pair
    text = (t.valid != 0) & (t.types == 0)
    two_on = _clip(xp, xp.searchsorted(t.count, t.count + 2, side="left"), t.batch * t.seq - 1)
    before_clip = (text & (xp.take(kind, two_on) == 2) & (xp.take(t.start, two_on) != 0)
                   & (xp.take(t.row, two_on) == t.row) & (xp.take(t.count, two_on) == t.count + 2))
    after_clip = text & (t.in_row > 1) & (xp.take(kind, t.previous) == 2)
    return xp.where(before_clip | after_clip, xp.zeros_like(advance_by), advance_by)


def _assemble(tokens: _Tokens, arrays: dict[str, Any], *, merge: int,
              tokens_per_second: float | None, advance: str, split_video_frames: bool,
              omni: Omni | None) -> tuple[Any, Any]:
    xp, t = tokens.xp, tokens
    batch, seq, types = t.batch, t.seq, t.types
    kind, clip_audio = _group_kinds(t, omni)
    (t_g, h, w), video_ordinal = _group_grids(t, kind, arrays, merge, split_video_frames)
    temporal = _temporal(t, kind == 2, video_ordinal, arrays, tokens_per_second, omni)
    grid_token = (types == 1) | (types == 2)
    # a clip's video tokens are ranked among its video tokens, its audio among its audio
    vision_offset = xp.where(types == 2, t.rank(t.mine(2)), t.offset)
    linear = xp.where(types == AUDIO, t.rank(t.mine(AUDIO)), t.offset)
    step_t, step_h, step_w = (xp.floor_divide(vision_offset, h * w), xp.remainder(
        xp.floor_divide(vision_offset, w), h), xp.remainder(vision_offset, w))
    if advance == "max_hw":
        jump = xp.maximum(h, w)
    else:
        jump = xp.maximum(xp.maximum(temporal(t_g - 1), h - 1), w - 1) + 1
        if clip_audio is not None:  # past the clip's audio too
            jump = xp.maximum(jump, clip_audio)
    advance_by = _advance_by(t, kind, jump, omni)
    before = xp.cumulative_sum(advance_by) - advance_by  # over the batch: subtract the row's
    row_before = xp.take(xp.concat([t.zeros(1), xp.cumulative_sum(advance_by)[:-1]]),
                         t.row * seq)
    group_start = xp.take(before, t.first) - row_before
    # text from the advance (a clip's start and end pairs share ids), audio by its rank
    linear = xp.where(types == AUDIO, group_start + linear, before - row_before)
    ids = [xp.where(grid_token, group_start + part, linear)
           for part in (temporal(step_t), step_h, step_w)]
    ids = [xp.where(t.valid != 0, i, xp.zeros_like(types)) for i in ids]
    position_ids = xp.reshape(xp.stack(ids), (3, batch, seq))
    largest = xp.max(xp.reshape(xp.stack(ids), (3, batch, seq)), axis=(0, 2))
    valid_tokens = xp.sum(xp.reshape(t.valid, (batch, seq)), axis=1)
    return position_ids, xp.reshape(largest + 1 - valid_tokens, (batch, 1))
