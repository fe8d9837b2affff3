"""Multimodal rope position ids (Qwen2-VL, Qwen2.5-VL): the (temporal, row, column) ids of a
token sequence with image and video groups, and the rope_deltas that continue them while
decoding. Vectorised: group starts, in-group offsets and start positions come from cumulative
sums and a searchsorted over the flattened batch, with no loop over tokens."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import array_api, params
from ..errors import ParameterError
from ..host_cache import compiling

__all__ = ["mrope_position_ids"]

ADVANCES = ("max_id", "max_hw")


def _host(value: Any) -> np.ndarray | None:
    """The values of a concrete array (None under tracing, where no check can read them)."""
    if compiling():  # torch.compile would trace the NumPy calls into the graph
        return None
    try:
        return np.asarray(value)
    except Exception:
        try:
            return np.from_dlpack(value)
        except Exception:
            return None


def _check_grids(types: np.ndarray, mask: np.ndarray | None, grids: dict[int, Any],
                 merge: int) -> None:
    """Every image/video group has a grid, in order, with as many tokens as the group."""
    names = {1: "image_grid_thw", 2: "video_grid_thw"}
    rows = {k: (_host(g).tolist() if g is not None else []) for k, g in grids.items()}
    used = {1: 0, 2: 0}
    for b in range(types.shape[0]):
        kept = types[b] if mask is None else types[b][mask[b].astype(bool)]
        change = np.flatnonzero(np.diff(kept)) + 1
        for group in np.split(kept, change):
            kind = int(group[0]) if group.size else 0
            if kind == 0:
                continue
            if used[kind] >= len(rows[kind]):
                raise ParameterError(f"{names[kind]} has {len(rows[kind])} rows but token_types "
                                     f"has more {'image' if kind == 1 else 'video'} groups "
                                     f"(batch row {b})")
            t, h, w = rows[kind][used[kind]]
            expected = t * (h // merge) * (w // merge)
            if group.size != expected:
                raise ParameterError(
                    f"{names[kind]}[{used[kind]}]={[t, h, w]} gives t·(h/{merge})·(w/{merge}) = "
                    f"{expected} tokens but its group in batch row {b} has {group.size}")
            used[kind] += 1
    for kind in (1, 2):
        if used[kind] != len(rows[kind]):
            raise ParameterError(f"{names[kind]} has {len(rows[kind])} rows but token_types has "
                                 f"{used[kind]} {'image' if kind == 1 else 'video'} groups")


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


def mrope_position_ids(
    token_types: Any, image_grid_thw: Any = None, video_grid_thw: Any = None,
    second_per_grid_ts: Any = None, attention_mask: Any = None, *,
    spatial_merge_size: int = 2, tokens_per_second: float | None = None,
    advance: str = "max_id", split_video_frames: bool = False,
) -> tuple[Any, Any]:
    """``(position_ids [3, batch, seq], rope_deltas [batch, 1])`` of an M-RoPE model.

    ``token_types`` ``[batch, seq]``: 0 text, 1 image, 2 video (transformers'
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
    ``rope_deltas = max id + 1 - tokens``: decoding step ``s`` uses ``s + rope_deltas``."""
    xp = array_api.namespace(token_types=token_types, image_grid_thw=image_grid_thw,
                       video_grid_thw=video_grid_thw, second_per_grid_ts=second_per_grid_ts,
                       attention_mask=attention_mask)
    params.choice("advance", advance, ADVANCES)
    merge = params.count("spatial_merge_size", spatial_merge_size)
    if tokens_per_second is not None and (isinstance(tokens_per_second, bool) or not isinstance(
            tokens_per_second, int | float) or tokens_per_second <= 0):
        raise ParameterError(f"tokens_per_second={tokens_per_second!r} must be a positive number")
    if not isinstance(split_video_frames, bool):
        raise ParameterError(f"split_video_frames={split_video_frames!r} must be True or False")
    if split_video_frames and tokens_per_second is not None:
        raise ParameterError(f"tokens_per_second={tokens_per_second!r} with split_video_frames: "
                             "Qwen3-VL's frames carry their time as timestamp text, not ids")
    if token_types.ndim != 2:
        raise ParameterError(f"token_types must be [batch, seq], got shape "
                             f"{tuple(token_types.shape)}")
    batch, seq = int(token_types.shape[0]), int(token_types.shape[1])
    for name, grid in (("image_grid_thw", image_grid_thw), ("video_grid_thw", video_grid_thw)):
        if grid is not None and (grid.ndim != 2 or int(grid.shape[1]) != 3):
            raise ParameterError(f"{name} must be [n, 3] (t, h, w) rows, got shape "
                                 f"{tuple(grid.shape)}")
    if attention_mask is not None and tuple(attention_mask.shape) != (batch, seq):
        raise ParameterError(f"attention_mask has shape {tuple(attention_mask.shape)} but "
                             f"token_types has shape {(batch, seq)}")
    host_types = _host(token_types)
    if host_types is not None:
        if not np.isin(host_types, (0, 1, 2)).all():
            bad = host_types[~np.isin(host_types, (0, 1, 2))][0]
            raise ParameterError(f"token_types contains {int(bad)}: 0 text, 1 image, 2 video")
        mask = None if attention_mask is None else _host(attention_mask)
        videos = video_grid_thw
        if split_video_frames and video_grid_thw is not None:
            rows = _host(video_grid_thw)
            videos = None if rows is None else np.array(
                [[1, h, w] for t, h, w in rows.tolist() for _ in range(t)]).reshape(-1, 3)
        _check_grids(host_types, mask, {1: image_grid_thw, 2: videos}, merge)

    index = token_types.dtype
    device = array_api.device_of(token_types)

    def zeros(n: int) -> Any:
        return array_api.asarray(xp, [0] * n, dtype=index, device=device)
    types = xp.reshape(token_types, (batch * seq,))
    valid = (xp.ones_like(types) if attention_mask is None
             else xp.astype(xp.reshape(attention_mask, (batch * seq,)) != 0, index))
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
    prev_type = xp.where(in_row == 1, xp.full_like(types, -1), xp.take(types, previous))
    start = xp.astype((valid != 0) & (types != prev_type), index)

    key = xp.cumulative_sum(start)  # nondecreasing over the flattened batch
    first = xp.searchsorted(key, key, side="left")  # flat index of each group's first token
    offset = count - xp.take(count, first)  # the in-group index (valid tokens only)

    kind = xp.take(types, first)
    ordinals = {k: xp.take(xp.cumulative_sum(start * xp.astype(types == k, index)), first) - 1
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
    if tokens_per_second is not None and video_grid_thw is not None:
        seconds = (array_api.asarray(xp, [1.0] * int(video_grid_thw.shape[0]), dtype=f32,
                               device=device)
                   if second_per_grid_ts is None else xp.astype(second_per_grid_ts, f32))
        per_video = xp.take(seconds, _clip(xp, ordinals[2], int(seconds.shape[0]) - 1))
        interval = xp.where(is_video, per_video * float(tokens_per_second), interval)

    def temporal(i: Any) -> Any:
        return xp.astype(xp.floor(xp.astype(i, f32) * interval), index)

    vision = kind != 0
    hw = h * w
    step_t, step_h, step_w = (xp.floor_divide(offset, hw), xp.remainder(
        xp.floor_divide(offset, w), h), xp.remainder(offset, w))
    if advance == "max_hw":
        jump = xp.maximum(h, w)
    else:
        jump = xp.maximum(xp.maximum(temporal(t - 1), h - 1), w - 1) + 1
    advance_by = xp.where(vision, jump * start, valid)
    before = xp.cumulative_sum(advance_by) - advance_by  # over the batch: subtract the row's
    row_before = xp.take(xp.concat([zeros(1),
                                    xp.cumulative_sum(advance_by)[:-1]]), row * seq)
    group_start = xp.take(before, first) - row_before
    zero = xp.zeros_like(types)
    ids = [xp.where(vision, group_start + part, group_start + offset)
           for part in (temporal(step_t), step_h, step_w)]
    ids = [xp.where(valid != 0, i, zero) for i in ids]
    position_ids = xp.reshape(xp.stack(ids), (3, batch, seq))
    largest = xp.max(xp.reshape(xp.stack(ids), (3, batch, seq)), axis=(0, 2))
    tokens = xp.sum(xp.reshape(valid, (batch, seq)), axis=1)
    return position_ids, xp.reshape(largest + 1 - tokens, (batch, 1))
