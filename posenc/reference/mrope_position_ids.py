"""Multimodal rope position ids (Qwen2-VL, Qwen2.5-VL): text tokens count up on all three axes;
an image or video group gets (temporal, row, column) ids offset by the position it starts at;
rope_deltas = max id + 1 - tokens, for decoding. A transcription of transformers'
get_rope_index loop (5.x for advance 'max_hw', 4.x / vLLM for 'max_id')."""

from __future__ import annotations

import itertools
import math

import numpy as np


def _vision_ids(start, grid, merge, interval):
    t, h, w = int(grid[0]), int(grid[1]) // merge, int(grid[2]) // merge
    ids = []
    for ti in range(t):
        for hi in range(h):
            for wi in range(w):
                temporal = math.floor(np.float32(ti) * np.float32(interval))  # float32 as peers
                ids.append((start + temporal, start + hi, start + wi))
    return ids


def mrope_position_ids(token_types, image_grid_thw, video_grid_thw, second_per_grid_ts,
                       attention_mask, *, spatial_merge_size, tokens_per_second, advance,
                       split_video_frames):
    token_types = np.asarray(token_types)
    if split_video_frames and video_grid_thw is not None:  # Qwen3-VL: one group per frame
        video_grid_thw = [[1, h, w] for t, h, w in np.asarray(video_grid_thw).tolist()
                          for _ in range(t)]
    batch, seq = token_types.shape
    grids = {1: iter(np.asarray(image_grid_thw).tolist() if image_grid_thw is not None else []),
             2: iter(np.asarray(video_grid_thw).tolist() if video_grid_thw is not None else [])}
    seconds = iter(np.asarray(second_per_grid_ts, dtype=np.float64).tolist()
                   if second_per_grid_ts is not None else [])
    out = np.zeros((3, batch, seq))
    deltas = np.zeros((batch, 1))
    for b in range(batch):
        keep = (np.ones(seq, bool) if attention_mask is None
                else np.asarray(attention_mask)[b].astype(bool))
        types = token_types[b][keep].tolist()
        ids = []
        pos = 0
        for kind, group in itertools.groupby(types):
            n = len(list(group))
            if kind == 0:
                ids += [(pos + i,) * 3 for i in range(n)]
                pos += n
                continue
            grid = next(grids[kind])
            interval = 1.0
            if kind == 2 and tokens_per_second is not None:
                interval = np.float32(tokens_per_second) * np.float32(next(seconds, 1.0))
            vision = _vision_ids(pos, grid, spatial_merge_size, interval)
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
