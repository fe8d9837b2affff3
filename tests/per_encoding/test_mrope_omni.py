"""Qwen2.5-Omni TMRoPE and Qwen3-Omni position ids: the goldens against transformers' own
Qwen2.5-Omni / Qwen3-Omni get_rope_index (called unbound on a stand-in holding only the config, no weights),
the implementation against the reference, and bad inputs naming the parameter and the value."""

from __future__ import annotations

import itertools
import types as pytypes
from typing import Any

import numpy as np
import pytest

from posenc import golden
from posenc.catalog import specs
from posenc.errors import ParameterError
from posenc.reference.mrope_position_ids import mrope_position_ids as reference

NAMES = ("token_types", "image_grid_thw", "video_grid_thw", "second_per_grid_ts",
         "attention_mask", "audio_lengths")
TEXT_ID, VISION_START, AUDIO_START = 10, 20, 21
KIND_IDS = {0: TEXT_ID, 1: 31, 2: 32, 3: 33}


def _omni_cases() -> list[str]:
    spec = specs()["mrope_position_ids"]
    return [c.name for c in spec.cases
            if {**spec.defaults(), **c.params}["position_id_per_seconds"] is not None]


def _input_ids(token_types: np.ndarray, mask: np.ndarray, clips: bool) -> np.ndarray:
    """Token ids for transformers: the text token before an image, video or audio group
    becomes its vision / audio start, the two before a clip (use_audio_in_video) both."""
    ids = np.vectorize(KIND_IDS.get)(token_types)
    for b, row in enumerate(token_types):
        kept = np.flatnonzero(mask[b])
        i = 0
        for _, run in itertools.groupby(row[kept].tolist(),
                                        key=lambda k: 2 if clips and k == 3 else k):
            run = list(run)
            if run[0] != 0:
                if 2 in run and clips:
                    assert row[kept[i - 2]] == 0 and row[kept[i - 1]] == 0
                    ids[b, kept[i - 2]], ids[b, kept[i - 1]] = VISION_START, AUDIO_START
                else:
                    assert row[kept[i - 1]] == 0, "a group needs its start token"
                    ids[b, kept[i - 1]] = AUDIO_START if run[0] == 3 else VISION_START
            i += len(run)
    return ids


def _qwen3_omni():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    try:
        from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe as module
    except ImportError:
        pytest.skip("transformers has no Qwen3-Omni")
    return module


def _qwen3_feature_lengths(tokens: list[int], n_window: int) -> list[int]:
    """Feature lengths that Qwen3-Omni's own _get_feat_extract_output_lengths turns into
    ``tokens`` (the smallest of each)."""
    module = _qwen3_omni()
    out = module._get_feat_extract_output_lengths(np.arange(1, 2000), n_window)
    return [int(np.flatnonzero(out == n)[0]) + 1 for n in tokens]


def _transformers(inputs: dict, params: dict) -> tuple[np.ndarray, np.ndarray]:
    import torch
    qwen3 = params.get("omni_model") == "qwen3_omni"
    Omni = (_qwen3_omni().Qwen3OmniMoePreTrainedModelForConditionalGeneration if qwen3
            else _omni_class())
    config = pytypes.SimpleNamespace(audio_config=pytypes.SimpleNamespace(n_window=50),
        image_token_id=KIND_IDS[1], video_token_id=KIND_IDS[2], audio_token_id=KIND_IDS[3],
        vision_start_token_id=VISION_START, audio_start_token_id=AUDIO_START,
        position_id_per_seconds=params["position_id_per_seconds"],
        seconds_per_chunk=params["seconds_per_chunk"])
    stub = pytypes.SimpleNamespace(config=config, spatial_merge_size=params["spatial_merge_size"])
    for name in ("get_llm_pos_ids_for_vision", "get_chunked_index")[:1 if qwen3 else 2]:
        setattr(stub, name, pytypes.MethodType(getattr(Omni, name), stub))
    types = inputs["token_types"]
    mask = (np.ones_like(types) if inputs["attention_mask"] is None
            else inputs["attention_mask"])
    ids = _input_ids(types, mask, params["use_audio_in_video"])

    def tensor(name):
        return None if inputs[name] is None else torch.tensor(inputs[name])
    seconds = tensor("second_per_grid_ts")
    if seconds is None and inputs["video_grid_thw"] is not None:
        seconds = torch.ones(len(inputs["video_grid_thw"]))
    # audio_seqlens are feature lengths: Qwen2.5-Omni's encoder turns 4n of them into n tokens
    audio = None
    if inputs["audio_lengths"] is not None:
        lengths = inputs["audio_lengths"].tolist()
        audio = torch.tensor(_qwen3_feature_lengths(lengths, 50) if qwen3
                             else [4 * n for n in lengths])
    position_ids, deltas = Omni.get_rope_index(
        stub, torch.tensor(ids), image_grid_thw=tensor("image_grid_thw"),
        video_grid_thw=tensor("video_grid_thw"), attention_mask=torch.tensor(mask),
        use_audio_in_video=params["use_audio_in_video"], audio_seqlens=audio,
        second_per_grids=seconds)
    return position_ids.numpy(), deltas.numpy()


@pytest.mark.parametrize("case_name", _omni_cases())
def test_goldens_match_transformers_omni(case_name: str) -> None:
    """The golden ids where attention_mask is 1 (Qwen2.5-Omni leaves padding at 1, posenc at
    0) and the rope_deltas equal transformers' Qwen2.5-Omni or Qwen3-Omni get_rope_index on
    the same tokens."""
    spec = specs()["mrope_position_ids"]
    case = golden.load(spec).cases[case_name]
    params = {**spec.defaults(), **case.params}
    inputs = {n: case.inputs.get(n) for n in NAMES}
    batch, seq = inputs["token_types"].shape
    n = 3 * batch * seq
    ids, deltas = case.output[:n].reshape(3, batch, seq), case.output[n:].reshape(batch, 1)
    expected_ids, expected_deltas = _transformers(inputs, params)
    keep = np.broadcast_to((np.ones((batch, seq)) if inputs["attention_mask"] is None
                            else inputs["attention_mask"]).astype(bool), ids.shape)
    np.testing.assert_array_equal(ids[keep], expected_ids[keep])
    np.testing.assert_array_equal(deltas, expected_deltas)


def _omni_class():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    try:
        from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import (
            Qwen2_5OmniPreTrainedModelForConditionalGeneration as Omni,
        )
    except ImportError:
        pytest.skip("transformers has no Qwen2.5-Omni")
    return Omni


def _transformers_layout(grid, seconds: float, audio: int, pps: int, per_chunk: int) -> list:
    """The clip's token kinds by transformers' own get_chunked_index on its own video ids."""
    import torch
    omni = _omni_class()
    t, h, w = grid
    t_index = (torch.arange(t) * torch.tensor(seconds).float() * pps).long()
    video = omni.get_llm_pos_ids_for_vision(None, 0, 0, 2, t_index, [h], [w])[0]
    chunks = [omni.get_chunked_index(None, ids, per_chunk, 0)
              for ids in (video, torch.arange(audio))]
    kinds = []
    for j in range(max(map(len, chunks))):
        for kind, cut in zip((2, 3), chunks, strict=True):
            if j < len(cut):
                kinds += [kind] * (cut[j][1] - cut[j][0])
    return kinds


def _check_clip_vs_transformers(pe, kinds: Any, seconds: float, audio: int,
                                params: dict) -> None:
    """One [3, 4, 4] clip laid out as ``kinds`` between text: the reference's and the
    implementation's ids and rope_deltas equal transformers' get_rope_index."""
    types = np.array([[0, 0, *list(kinds), 0, 0, 0]])
    grid, secs, lengths = np.array([[3, 4, 4]]), np.array([seconds]), np.array([audio])
    inputs = dict(zip(NAMES, (types, None, grid, secs, None, lengths), strict=True))
    expected, deltas = _transformers(inputs, params)
    ref_ids, ref_deltas = reference(types, None, grid, secs, None, lengths, **params)
    ids, got_deltas = pe.mrope_position_ids(types, None, grid, secs.astype(np.float32), None,
                                            lengths, **params)
    np.testing.assert_array_equal(ref_ids, expected)
    np.testing.assert_array_equal(ref_deltas, deltas)
    np.testing.assert_array_equal(np.asarray(ids), expected)
    np.testing.assert_array_equal(np.asarray(got_deltas), deltas)


# the extra clips run the implementation on NumPy and PyTorch: the other backends run the same
# array-API code, and the goldens check them on every backend
ORACLE_BACKENDS = pytest.mark.parametrize("pe", ["numpy", "torch"], indirect=True)


@ORACLE_BACKENDS
@pytest.mark.parametrize(("seconds", "audio"), [(1.0, 10), (2.0, 18), (0.5, 3), (3.0, 1),
                                                (0.3, 7)])
def test_more_clips_match_transformers(pe, seconds: float, audio: int) -> None:
    """Clips with fewer and more audio chunks than video chunks, frames split over chunks:
    laid out by transformers' get_chunked_index, posenc's reference and implementation give
    transformers' get_rope_index ids."""
    params = {**specs()["mrope_position_ids"].defaults(), "position_id_per_seconds": 4,
              "use_audio_in_video": True, "seconds_per_chunk": 1}
    kinds = _transformers_layout([3, 4, 4], seconds, audio, 4, 4)
    _check_clip_vs_transformers(pe, kinds, seconds, audio, params)


@ORACLE_BACKENDS
@pytest.mark.parametrize(("seconds", "audio"), [(1.0, 5), (0.5, 9), (2.0, 1), (1.5, 12)])
def test_qwen3_omni_clips_match_transformers(pe, seconds: float, audio: int) -> None:
    """Qwen3-Omni clips merged on time: transformers' get_rope_index lays a clip out by its own
    merge whatever the token kinds say, so posenc's layout (fed as token_types) and ids must
    both agree with it for the ids to match."""
    from posenc.encodings.mrope_groups import Omni, clip_layout

    params = {**specs()["mrope_position_ids"].defaults(), "position_id_per_seconds": 2,
              "use_audio_in_video": True, "omni_model": "qwen3_omni"}
    frames = np.floor(np.arange(3, dtype=np.float32) * np.float32(seconds) * 2).astype(int)
    kinds = clip_layout(np.repeat(frames, 4), audio, Omni(2.0, True, 4, True, True))
    _check_clip_vs_transformers(pe, kinds, seconds, audio, params)


def test_audio_video_order_follows_its_layout(pe) -> None:
    """chunk_order audio_video (the diagnosis's swap): the implementation on the swapped layout
    gives the reference's ids, and the reference on the true layout differs from the golden."""
    spec = specs()["mrope_position_ids"]
    case = golden.load(spec).cases["omni_video_with_audio_chunks"]
    inputs = [case.inputs.get(n) for n in NAMES]
    params = {**spec.defaults(), **case.params, "chunk_order": "audio_video"}
    swapped = np.array([[0, 0, 0] + [3] * 4 + [2] * 4 + [3] * 4 + [2] * 4 + [3] * 2
                        + [2] * 4 + [0, 0, 0]])
    ids, _ = pe.mrope_position_ids(swapped, *inputs[1:], **params)
    expected, _ = reference(swapped, *inputs[1:], **params)
    np.testing.assert_array_equal(np.asarray(ids), expected)
    wrong, _ = reference(*inputs, **params)
    batch, seq = inputs[0].shape
    assert not np.array_equal(wrong, case.output[:3 * batch * seq].reshape(3, batch, seq))


OMNI = {"position_id_per_seconds": 25}
CLIP = {"position_id_per_seconds": 4, "seconds_per_chunk": 1, "use_audio_in_video": True}
AUDIO = np.array([[0, 0, 3, 3, 3, 0]])
CLIP_TYPES = np.array([[0, 0, 2, 2, 2, 2, 3, 3, 0, 0]])
G = np.array([[1, 4, 4]])


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((AUDIO,), {}, r"token_types contains 3: 0 text, 1 image, 2 video \(3 audio needs "
                       r"position_id_per_seconds"),
        ((AUDIO, None, None, None, None, np.array([4])), OMNI,
         r"audio_lengths\[0\]=4 but its audio group in batch row 0 has 3 tokens"),
        ((AUDIO,), OMNI, r"audio_lengths has 0 rows but token_types has more audio groups"),
        ((AUDIO, None, None, None, None, np.array([3, 2])), OMNI,
         r"audio_lengths has 2 rows but token_types has 1 audio groups"),
        ((AUDIO, None, None, None, None, np.array([[3]])), OMNI,
         r"audio_lengths must be \[n_audios\], got shape \(1, 1\)"),
        ((CLIP_TYPES, None, G, None, None, np.array([3])), CLIP,
         r"audio_lengths\[0\]=3 but the video clip in batch row 0 \(use_audio_in_video\) has 2"),
        ((np.array([[0, 0, 2, 2, 2, 2, 0, 0, 3, 3]]), None, G, None, None, np.array([2])),
         CLIP, r"audio_lengths\[0\]=2 but the video clip in batch row 0 \(use_audio_in_video\) "
               r"has 0 audio tokens"),
        ((np.array([[0, 0, 3, 3, 2, 2, 2, 2, 0, 0]]), None, G, None, None, np.array([2])), CLIP,
         r"token_types of the video clip in batch row 0 \(use_audio_in_video\) are \[3, 3, 2, "
         r"2, 2, 2\], not the TMRoPE layout \[2, 2, 2, 2, 3, 3\] \(video chunk then audio"),
        ((CLIP_TYPES, None, G), {"use_audio_in_video": True},
         r"use_audio_in_video=True needs position_id_per_seconds"),
        ((AUDIO,), {**OMNI, "tokens_per_second": 2},
         r"tokens_per_second=2 with position_id_per_seconds=25"),
        ((AUDIO,), {**OMNI, "advance": "max_hw"},
         r"advance='max_hw' with position_id_per_seconds=25"),
        ((AUDIO,), {**OMNI, "split_video_frames": True},
         r"split_video_frames=True with position_id_per_seconds=25"),
        ((AUDIO,), {"position_id_per_seconds": 0}, r"position_id_per_seconds=0 must be a"),
        ((AUDIO,), {**OMNI, "seconds_per_chunk": 0.01},
         r"seconds_per_chunk=0.01 gives int\(position_id_per_seconds · seconds_per_chunk\) = 0"),
        ((AUDIO,), {**OMNI, "chunk_order": "audio"}, r"chunk_order='audio' is not one of"),
        ((AUDIO,), {**OMNI, "use_audio_in_video": 1}, r"use_audio_in_video=1 must be True or"),
        ((AUDIO,), {**OMNI, "omni_model": "qwen3"}, r"omni_model='qwen3' is not one of"),
        ((AUDIO,), {**OMNI, "omni_model": "qwen3_omni", "chunk_order": "audio_video"},
         r"chunk_order='audio_video' with omni_model='qwen3_omni'"),
        ((np.array([[0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 0, 0]]), None, np.array([[2, 4, 4]]),
          np.array([0.5])), {**OMNI, "position_id_per_seconds": 3, "omni_model": "qwen3_omni"},
         r"second_per_grid_ts\[0\]=0.5 gives Qwen3-Omni temporal ids \[0.0, 1.5\]"),
        ((np.array([[0, 2, 2, 2, 2, 3, 3, 0, 0]]), None, G, None, None, np.array([2])), CLIP,
         r"the video clip in batch row 0 \(use_audio_in_video\) has 1 text tokens before it "
         r"and 2 after it"),
    ],
)
def test_bad_omni_inputs(pe, args, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.mrope_position_ids(*args, **kwargs)
