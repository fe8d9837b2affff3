"""Multimodal rope position ids (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen2.5-Omni): text tokens
count up on all three axes; an image or video group gets (temporal, row, column) ids offset by
the position it starts at; an audio group counts up on all three axes; rope_deltas = max id + 1
- tokens, for decoding. A transcription of transformers' get_rope_index loops (5.x for advance
'max_hw', 4.x / vLLM for 'max_id'; Qwen2.5-Omni's TMRoPE with its chunked audio-in-video,
Qwen3-Omni's merged on time)."""

from __future__ import annotations

import itertools
import math

import numpy as np

TEXT, IMAGE, VIDEO, AUDIO = 0, 1, 2, 3


def _vision_ids(start, grid, merge, temporal):
    t, h, w = int(grid[0]), int(grid[1]) // merge, int(grid[2]) // merge
    return [(start + temporal[ti], start + hi, start + wi)
            for ti in range(t) for hi in range(h) for wi in range(w)]


def _chunks(values, start, per_chunk):
    """transformers' get_chunked_index: a new chunk begins at the first token (at most one per
    token) whose value - start reaches the next multiple of per_chunk."""
    bounds, first, current = [], 0, 1
    for i, v in enumerate(values):
        if v - start >= current * per_chunk:
            bounds.append((first, i))
            first = i
            current += 1
    bounds.append((first, len(values)))
    return bounds


def _clip_ids(start, video, audio_len, per_chunk, order):
    """A video with its audio (Qwen2.5-Omni use_audio_in_video): both start at ``start``, cut
    into chunks of per_chunk temporal ids, laid out chunk pair by chunk pair."""
    audio = [(start + i,) * 3 for i in range(audio_len)]
    video_chunks = _chunks([v[0] for v in video], start, per_chunk)
    audio_chunks = _chunks([a[0] for a in audio], start, per_chunk)
    ids = []
    for j in range(max(len(video_chunks), len(audio_chunks))):
        pair = [video[slice(*video_chunks[j])] if j < len(video_chunks) else [],
                audio[slice(*audio_chunks[j])] if j < len(audio_chunks) else []]
        for part in (pair if order == "video_audio" else pair[::-1]):
            ids += part
    return ids


def _merged_ids(video, audio_len, start):
    """Qwen3-Omni: video and audio merged token by token on their temporal ids, the video token
    first on a tie."""
    audio = [(start + i,) * 3 for i in range(audio_len)]
    ids, v, a = [], 0, 0
    while v < len(video) and a < len(audio):
        if video[v][0] <= audio[a][0]:
            ids.append(video[v])
            v += 1
        else:
            ids.append(audio[a])
            a += 1
    return ids + video[v:] + audio[a:]


def _groups(types, use_audio_in_video):
    """(kind, length) runs; with audio in video, runs of video and audio tokens are one clip."""
    def cls(k):
        return VIDEO if use_audio_in_video and k == AUDIO else k
    for _, run in itertools.groupby(types, key=cls):
        run = list(run)
        kinds = set(run)
        yield (VIDEO if VIDEO in kinds else run[0]), run


def mrope_position_ids(token_types, image_grid_thw, video_grid_thw, second_per_grid_ts,
                       attention_mask, audio_lengths, *, spatial_merge_size, tokens_per_second,
                       advance, split_video_frames, position_id_per_seconds,
                       use_audio_in_video, seconds_per_chunk, chunk_order, omni_model):
    token_types = np.asarray(token_types)
    if split_video_frames and video_grid_thw is not None:  # Qwen3-VL: one group per frame
        video_grid_thw = [[1, h, w] for t, h, w in np.asarray(video_grid_thw).tolist()
                          for _ in range(t)]
    omni = position_id_per_seconds is not None
    clips = omni and use_audio_in_video
    shared_pairs = clips and omni_model == "qwen2_5_omni"  # Qwen3-Omni counts them up
    batch, seq = token_types.shape
    grids = {IMAGE: iter(np.asarray(image_grid_thw).tolist() if image_grid_thw is not None
                         else []),
             VIDEO: iter(np.asarray(video_grid_thw).tolist() if video_grid_thw is not None
                         else [])}
    seconds = iter(np.asarray(second_per_grid_ts, dtype=np.float64).tolist()
                   if second_per_grid_ts is not None else [])
    audios = iter(np.asarray(audio_lengths).tolist() if audio_lengths is not None else [])
    out = np.zeros((3, batch, seq))
    deltas = np.zeros((batch, 1))
    for b in range(batch):
        keep = (np.ones(seq, bool) if attention_mask is None
                else np.asarray(attention_mask)[b].astype(bool))
        types = token_types[b][keep].tolist()
        ids = []
        pos = 0
        groups = list(_groups(types, omni and use_audio_in_video))
        for g, (kind, run) in enumerate(groups):
            n = len(run)
            if kind == TEXT:
                steps = [1] * n
                if shared_pairs and g > 0 and groups[g - 1][0] == VIDEO:
                    steps[0] = 0  # a clip's audio end and vision end share an id
                if shared_pairs and g + 1 < len(groups) and groups[g + 1][0] == VIDEO:
                    steps[n - 2] = 0  # and so do its vision start and audio start
                for step in steps:
                    ids.append((pos,) * 3)
                    pos += step
                continue
            if kind == AUDIO:
                length = int(next(audios))
                assert length == n, (length, n)
                ids += [(pos + i,) * 3 for i in range(n)]
                pos += n
                continue
            grid = next(grids[kind])
            frames = np.arange(int(grid[0]), dtype=np.float32)
            if omni:
                pps = np.float32(position_id_per_seconds)
                if kind == IMAGE:  # arange(t) · 1 · position_id_per_seconds
                    times = frames * pps
                else:  # (arange(t) · second_per_grid) · position_id_per_seconds, in float32
                    times = (frames * np.float32(next(seconds, 1.0))) * pps
            else:
                interval = np.float32(1.0)
                if kind == VIDEO and tokens_per_second is not None:
                    interval = np.float32(tokens_per_second) * np.float32(next(seconds, 1.0))
                times = frames * interval  # float32 as peers
            if omni and omni_model == "qwen3_omni":  # Qwen3-Omni keeps them unfloored
                assert (times == np.floor(times)).all(), times
            temporal = [math.floor(x) for x in times.tolist()]
            vision = _vision_ids(pos, grid, spatial_merge_size, temporal)
            if kind == VIDEO and omni and use_audio_in_video:
                audio_len = int(next(audios))
                assert audio_len == run.count(AUDIO) and len(vision) == run.count(VIDEO)
                per_chunk = int(position_id_per_seconds * seconds_per_chunk)
                vision = (_clip_ids(pos, vision, audio_len, per_chunk, chunk_order)
                          if omni_model == "qwen2_5_omni" else _merged_ids(vision, audio_len, pos))
            ids += vision
            if advance == "max_hw":  # transformers 5.x
                pos += max(int(grid[1]), int(grid[2])) // spatial_merge_size
            else:  # Qwen2-VL's original code, transformers 4.x, vLLM: after the largest id
                pos = max(max(v) for v in vision) + 1
        columns = np.flatnonzero(keep)
        for j, triple in zip(columns, ids, strict=True):
            out[:, b, j] = triple
        deltas[b, 0] = max(max(v) for v in ids) + 1 - len(ids)
    return out, deltas
