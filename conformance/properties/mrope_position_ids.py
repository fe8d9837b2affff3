"""Properties of the M-RoPE position-id builder: text alone counts up, rope_deltas continue
the ids of a prompt while decoding, and Qwen2.5-Omni's audio and clips keep their blocks."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ..context import Context
from . import register


def _split(out: np.ndarray, batch: int, seq: int) -> tuple[np.ndarray, np.ndarray]:
    n = 3 * batch * seq
    return out[:n].reshape(3, batch, seq), out[n:].reshape(batch, 1)


@register("mrope_ids_text_counts_up")
def text_counts_up(ctx: Context) -> None:
    """A text-only batch gets ids arange over its unmasked tokens on all three axes (left
    padding 0) and rope_deltas 0."""

    @ctx.given(seq=st.integers(1, 40), pad=st.integers(0, 39))
    def check(seq: int, pad: int) -> None:
        pad = min(pad, seq - 1)
        mask = np.ones((2, seq), np.int64)
        mask[1, :pad] = 0
        out = ctx.run({"token_types": np.zeros((2, seq), np.int64), "attention_mask": mask})
        ids, deltas = _split(out, 2, seq)
        expected = np.stack([np.arange(seq), np.concatenate([np.zeros(pad),
                                                             np.arange(seq - pad)])])
        ctx.assert_equal(ids, np.broadcast_to(expected, (3, 2, seq)), f"text ids, pad {pad}")
        ctx.assert_equal(deltas, np.zeros((2, 1)), "rope_deltas of text")


@register("mrope_ids_deltas_continue_decoding")
def deltas_continue_decoding(ctx: Context) -> None:
    """After a prompt with one image of (h, w) patches, rope_deltas = largest id + 1 - tokens,
    and appending text tokens to the prompt gives them cache position + rope_deltas, exactly
    what decoding with the deltas uses."""
    merge = int(ctx.params.get("spatial_merge_size", 2))

    @ctx.given(before=st.integers(0, 5), h=st.integers(1, 6), w=st.integers(1, 6),
               after=st.integers(1, 5))
    def check(before: int, h: int, w: int, after: int) -> None:
        n = h * w
        prompt = [0] * before + [1] * n
        types = np.array([prompt + [0] * after])
        grid = np.array([[1, h * merge, w * merge]])
        out = ctx.run({"token_types": types[:, :len(prompt)], "image_grid_thw": grid})
        _, deltas = _split(out, 1, len(prompt))
        largest = before + max(h, w) - 1 if n else before - 1
        ctx.assert_equal(deltas, np.array([[largest + 1 - len(prompt)]]), "rope_deltas")
        full = ctx.run({"token_types": types, "image_grid_thw": grid})
        ids, _ = _split(full, 1, types.shape[1])
        cache = np.arange(len(prompt), types.shape[1])
        ctx.assert_equal(ids[:, 0, len(prompt):], np.broadcast_to(cache + deltas[0, 0],
                                                                  (3, after)),
                         "text after the prompt vs cache position + rope_deltas")


@register("mrope_ids_omni_audio_counts_like_text")
def omni_audio_counts_like_text(ctx: Context) -> None:
    """Qwen2.5-Omni: audio groups (with their audio_lengths) count up on all three axes exactly
    as text would, so a text-and-audio row gets arange ids and rope_deltas 0."""

    @ctx.given(lengths=st.lists(st.integers(1, 6), min_size=1, max_size=3),
               gap=st.integers(1, 3))
    def check(lengths: list[int], gap: int) -> None:
        row = [0] * gap
        for n in lengths:
            row += [3] * n + [0] * gap
        out = ctx.run({"token_types": np.array([row]),
                       "audio_lengths": np.array(lengths)})
        ids, deltas = _split(out, 1, len(row))
        ctx.assert_equal(ids, np.broadcast_to(np.arange(len(row)), (3, 1, len(row))),
                         f"audio groups {lengths}")
        ctx.assert_equal(deltas, np.zeros((1, 1)), "rope_deltas")


@register("mrope_ids_omni_clip_blocks")
def omni_clip_blocks(ctx: Context) -> None:
    """Qwen2.5-Omni use_audio_in_video: in a clip laid out in TMRoPE's chunk pairs, the video
    and the audio both start one past the shared id of the clip's start pair; the audio ids
    count up by one on all three axes, the video temporal ids never decrease and step by
    (frame · seconds) · position_id_per_seconds; the end pair shares max + 1 and the text after
    continues from there."""
    from posenc.encodings.mrope_groups import Omni, clip_layout

    pps = float(ctx.params["position_id_per_seconds"])
    per_chunk = int(pps * float(ctx.params.get("seconds_per_chunk", 2)))
    omni = Omni(pps, True, per_chunk, True)

    @ctx.given(t=st.integers(1, 4), hw=st.sampled_from([(2, 2), (2, 4), (4, 2)]),
               seconds=st.sampled_from([0.5, 1.0, 2.0, 3.0]), audio=st.integers(1, 14),
               before=st.integers(0, 2), after=st.integers(0, 2))
    def check(t: int, hw: tuple[int, int], seconds: float, audio: int, before: int,
              after: int) -> None:
        h, w = hw
        frame = (np.floor((np.arange(t, dtype=np.float32) * np.float32(seconds))
                          * np.float32(pps)).astype(np.int64))
        per_frame = (h // 2) * (w // 2)
        layout = clip_layout(np.repeat(frame, per_frame), audio, omni)
        row = np.array([0] * (before + 2) + layout.tolist() + [0] * (after + 2))
        out = ctx.run({"token_types": row[None], "video_grid_thw": np.array([[t, h, w]]),
                       "second_per_grid_ts": np.array([seconds]),
                       "audio_lengths": np.array([audio])})
        ids, deltas = _split(out, 1, row.size)
        ids = ids[:, 0]
        p = before + 1  # the clip's start pair shares id before ...
        ctx.assert_equal(ids[:, before:before + 2], np.full((3, 2), before), "start pair")
        clip = ids[:, before + 2:before + 2 + layout.size]
        ctx.assert_equal(clip[:, layout == 3],
                         np.broadcast_to(p + np.arange(audio), (3, audio)), "audio ids")
        video = clip[:, layout == 2]
        ctx.assert_equal(video[0], p + np.repeat(frame, per_frame), "video temporal ids")
        ctx.assert_equal(np.diff(video[0]) >= 0, np.ones(video.shape[1] - 1, bool),
                         "video temporal ids nondecreasing")
        top = int(clip.max())
        tail = ids[:, before + 2 + layout.size:]
        expected = np.concatenate([[top + 1, top + 1], top + 2 + np.arange(after)])
        ctx.assert_equal(tail, np.broadcast_to(expected, (3, after + 2)), "end pair and text")
        ctx.assert_equal(deltas, np.array([[expected[-1] + 1 - row.size]]), "rope_deltas")
