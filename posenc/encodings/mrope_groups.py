"""Host-side checks of the M-RoPE position-id builder's groups: every image, video and audio
group has its grid or length, in order, with as many tokens as it says; a Qwen2.5-Omni clip
(video with its audio) is laid out in the chunk pairs of TMRoPE."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ParameterError
from ..host_cache import compiling

TEXT, IMAGE, VIDEO, AUDIO = 0, 1, 2, 3
NAMES = {IMAGE: "image", VIDEO: "video", AUDIO: "audio"}


@dataclass(frozen=True)
class Omni:
    """Qwen2.5-Omni's TMRoPE settings (None in ``check_groups``: a VL model, no audio)."""

    position_id_per_seconds: float
    use_audio_in_video: bool
    per_chunk: int  # temporal ids per chunk: int(position_id_per_seconds · seconds_per_chunk)
    video_first: bool
    time_merge: bool = False  # Qwen3-Omni: merged token by token on time, no chunks


def host(value: Any) -> np.ndarray | None:
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


def check_seconds(seconds: np.ndarray | None) -> None:
    """``second_per_grid_ts`` (on the host): finite and >= 0, or a video's temporal ids
    become garbage (NaN or infinity cast to an integer) or run backwards."""
    if seconds is None:
        return
    flat = np.asarray(seconds, np.float64).reshape(-1)
    bad = np.flatnonzero(~np.isfinite(flat) | (flat < 0))
    if bad.size:
        i = int(bad[0])
        raise ParameterError(f"second_per_grid_ts[{i}]={float(flat[i])!r} must be a finite "
                             "number >= 0 (seconds per temporal grid step of a video)")


def check_grids(grids: dict[str, Any]) -> None:
    """Every grid row (t, h, w) is positive: a negative h and w multiply to a plausible token
    count and give ids that run backwards."""
    for name, grid in grids.items():
        rows = None if grid is None else host(grid)
        if rows is None or not rows.size:
            continue
        bad = np.flatnonzero((rows < 1).any(axis=-1))
        if bad.size:
            i = int(bad[0])
            raise ParameterError(f"{name}[{i}]={rows[i].tolist()} must be positive (t, h, w)")


ID_LIMIT = 2**31  # position ids are int32 in the engines (and in JAX without x64)


def check_temporal_range(video_grid_thw: Any, seconds: np.ndarray | None,
                         tokens_per_second: float | None, omni: Omni | None) -> None:
    """A video's last temporal id, (t - 1) · tokens_per_second · second_per_grid_ts (or
    · position_id_per_seconds), stays below 2**31: past it the float32 id has no integer."""
    rows = None if video_grid_thw is None else host(video_grid_thw)
    if rows is None or not rows.size:
        return
    rate = (omni.position_id_per_seconds if omni is not None else tokens_per_second)
    if rate is None:
        return
    per_video = (np.ones(len(rows)) if seconds is None
                 else np.asarray(seconds, np.float64).reshape(-1))
    rate_name = "position_id_per_seconds" if omni is not None else "tokens_per_second"
    for i, (t, second) in enumerate(zip(rows[:, 0].tolist(), per_video.tolist(), strict=False)):
        last = (t - 1) * float(rate) * second
        if last >= ID_LIMIT:
            what = "" if seconds is None else f" · second_per_grid_ts[{i}]={second:.6g}"
            raise ParameterError(f"video_grid_thw[{i}] t={t}: (t - 1) · {rate_name}={rate!r}"
                                 f"{what} puts the last temporal id of video {i} at {last:g}, "
                                 f"past 2**31 = {ID_LIMIT}")


def chunk_bounds(values: np.ndarray, per_chunk: int) -> np.ndarray:
    """Where transformers' get_chunked_index starts a new chunk in nondecreasing ``values``
    (relative to the clip's start): boundary k is the first token after boundary k - 1 whose
    value reaches k · per_chunk, so b_k = k + max_{j≤k} (f_j - j), f_j the first token at or
    past j · per_chunk. A frame whose ids jump several chunks is split over them."""
    n = values.size
    if n == 0:
        return np.zeros(0, np.int64)
    k = np.arange(1, int(values[-1]) // per_chunk + 2)
    first = np.searchsorted(values, k * per_chunk, side="left")
    bounds = k + np.maximum.accumulate(first - k)
    return bounds[bounds < n]


def clip_layout(video_ids: np.ndarray, audio_len: int, omni: Omni) -> np.ndarray:
    """The token kinds of a clip: chunk pairs (video then audio, or the reverse); Qwen3-Omni:
    video token i after the audio tokens of smaller ids, min(id_i, audio_len) of them."""
    if omni.time_merge:
        kinds = np.full(video_ids.size + audio_len, AUDIO, np.int64)
        kinds[np.arange(video_ids.size) + np.minimum(video_ids, audio_len)] = VIDEO
        return kinds
    cuts = [np.diff(np.concatenate([[0], chunk_bounds(v, omni.per_chunk), [v.size]]))
            for v in (video_ids, np.arange(audio_len))]
    pairs = max(len(c) for c in cuts)
    kinds = []
    for j in range(pairs):
        sizes = [c[j] if j < len(c) else 0 for c in cuts]
        part = [VIDEO] * int(sizes[0]), [AUDIO] * int(sizes[1])
        kinds += part[0] + part[1] if omni.video_first else part[1] + part[0]
    return np.array(kinds, np.int64)


def _times(t: int, second: float, omni: Omni) -> np.ndarray:
    """(arange(t) · seconds) · position_id_per_seconds in float32, as transformers."""
    return ((np.arange(t, dtype=np.float32) * np.float32(second))
            * np.float32(omni.position_id_per_seconds))


def _video_temporal(grid: list[int], second: float, merge: int, omni: Omni) -> np.ndarray:
    t, h, w = grid
    frames = np.floor(_times(t, second, omni)).astype(np.int64)
    return np.repeat(frames, (h // merge) * (w // merge))


def _check_whole_times(kind: int, index: int, t: int, second: float, omni: Omni) -> None:
    """Qwen3-Omni keeps temporal ids unfloored: only whole ones are integer position ids."""
    times = _times(t, second, omni)
    if omni.time_merge and (times != np.floor(times)).any():
        what = ("position_id_per_seconds" if kind == IMAGE
                else f"second_per_grid_ts[{index}]={second}")
        raise ParameterError(
            f"{what} gives Qwen3-Omni temporal ids {times.tolist()} (frame · seconds · "
            f"position_id_per_seconds={omni.position_id_per_seconds}), not whole numbers: "
            "Qwen3-Omni keeps them fractional, which integer position ids cannot hold")


def _rows(value: Any) -> list[Any]:
    if value is None:
        return []
    rows = host(value)
    return [] if rows is None else rows.tolist()


def check_groups(types: np.ndarray, mask: np.ndarray | None, grids: dict[int, Any],
                 merge: int, audio_lengths: Any = None, seconds: Any = None,
                 omni: Omni | None = None) -> None:
    """Every group has its row, with as many tokens as the row gives, and every row a group."""
    names = {IMAGE: "image_grid_thw", VIDEO: "video_grid_thw", AUDIO: "audio_lengths"}
    rows = {k: _rows(g) for k, g in grids.items()}
    rows[AUDIO] = _rows(audio_lengths)
    per_video = _rows(seconds)
    used = {IMAGE: 0, VIDEO: 0, AUDIO: 0}
    clips = omni is not None and omni.use_audio_in_video

    def take(kind: int, b: int) -> Any:
        if used[kind] >= len(rows[kind]):
            raise ParameterError(f"{names[kind]} has {len(rows[kind])} rows but token_types "
                                 f"has more {NAMES[kind]} groups (batch row {b})")
        used[kind] += 1
        return rows[kind][used[kind] - 1]

    for b in range(types.shape[0]):
        kept = types[b] if mask is None else types[b][mask[b].astype(bool)]
        cls = np.where(kept == AUDIO, VIDEO, kept) if clips else kept
        change = np.flatnonzero(np.diff(cls)) + 1
        groups = np.split(kept, change)
        for g, group in enumerate(groups):
            present = set(np.unique(group).tolist())
            if not group.size or present == {TEXT}:
                continue
            kind = VIDEO if VIDEO in present else int(group[0])
            if kind == AUDIO:
                length = take(AUDIO, b)
                if group.size != length:
                    raise ParameterError(f"audio_lengths[{used[AUDIO] - 1}]={length} but its "
                                         f"audio group in batch row {b} has {group.size} tokens")
                continue
            t, h, w = take(kind, b)
            expected = t * (h // merge) * (w // merge)
            count = int(np.sum(group == kind))
            if count != expected:
                raise ParameterError(
                    f"{names[kind]}[{used[kind] - 1}]={[t, h, w]} gives t·(h/{merge})·(w/{merge}) "
                    f"= {expected} tokens but its group in batch row {b} has {count} "
                    f"(spatial_merge_size={merge})")
            second = 1.0
            if kind == VIDEO and per_video:
                second = per_video[used[VIDEO] - 1]
            if omni is not None:
                _check_whole_times(kind, used[kind] - 1, t, second, omni)
            if kind == VIDEO and clips:
                _check_clip_ends(groups, g, b)
                _check_clip(group, b, take(AUDIO, b), used[AUDIO] - 1, [t, h, w], second,
                            merge, omni)
    for kind in (IMAGE, VIDEO, AUDIO):
        if used[kind] != len(rows[kind]):
            raise ParameterError(f"{names[kind]} has {len(rows[kind])} rows but token_types has "
                                 f"{used[kind]} {NAMES[kind]} groups")


def _check_clip(group: np.ndarray, b: int, audio_len: int, index: int, grid: list[int],
                second: float, merge: int, omni: Omni) -> None:
    """A use_audio_in_video clip holds its audio_lengths row of audio tokens, in chunk pairs."""
    count = int(np.sum(group == AUDIO))
    if count != audio_len:
        raise ParameterError(f"audio_lengths[{index}]={audio_len} but the video clip in batch row "
                             f"{b} (use_audio_in_video) has {count} audio tokens")
    expected = clip_layout(_video_temporal(grid, second, merge, omni), audio_len, omni)
    if not np.array_equal(group, expected):
        order = ("Qwen3-Omni: merged on time, video first on a tie" if omni.time_merge
                 else "video chunk then audio chunk" if omni.video_first
                 else "audio chunk first")
        raise ParameterError(
            f"token_types of the video clip in batch row {b} (use_audio_in_video) are "
            f"{group.tolist()}, not the TMRoPE layout {expected.tolist()} ({order}, "
            f"{omni.per_chunk} temporal ids a chunk: int(position_id_per_seconds · "
            "seconds_per_chunk))")


def _check_clip_ends(groups: list[np.ndarray], g: int, b: int) -> None:
    """A clip sits between its vision start and audio start and its audio end and vision end:
    two text tokens on each side (four between two clips)."""
    def text(k: int) -> int:
        return groups[k].size if 0 <= k < len(groups) and not groups[k].any() else 0

    def clip(k: int) -> bool:
        return 0 <= k < len(groups) and VIDEO in groups[k]
    before, after = text(g - 1), text(g + 1)
    need_before = 4 if clip(g - 2) else 2
    if before < need_before or after < 2:
        raise ParameterError(
            f"the video clip in batch row {b} (use_audio_in_video) has {before} text tokens "
            f"before it and {after} after it: it needs its vision start and audio start before "
            f"and its audio end and vision end after (two each, four between two clips)")
