"""M-RoPE position ids: bad inputs (grids that do not match the vision tokens name the grid
and the counts), and the goldens against transformers' Qwen2-VL / Qwen2.5-VL get_rope_index
called without weights (advance max_hw) and a transcription of vLLM's get_input_positions /
transformers 4.x (advance max_id)."""

from __future__ import annotations

import types as pytypes

import numpy as np
import pytest

from posenc import golden
from posenc.catalog import specs
from posenc.errors import ParameterError

TYPES = np.array([[0, 1, 1, 1, 1, 0]])
GRID = np.array([[1, 4, 4]])
VIDEO = np.array([[0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 0]])
VIDEO_GRID = np.array([[2, 4, 4]])


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((TYPES, np.array([[1, 4, 6]])), {},
         r"image_grid_thw\[0\]=\[1, 4, 6\] gives t·\(h/2\)·\(w/2\) = 6 tokens but its group in "
         r"batch row 0 has 4"),
        ((TYPES,), {}, r"image_grid_thw has 0 rows but token_types has more image groups"),
        ((TYPES, np.array([[1, 4, 4], [1, 2, 2]])), {},
         r"image_grid_thw has 2 rows but token_types has 1 image groups"),
        ((TYPES, GRID[0]), {}, r"image_grid_thw must be \[n, 3\] \(t, h, w\) rows, got shape"),
        ((TYPES + 2, GRID), {}, r"token_types contains 3: 0 text, 1 image, 2 video"),
        ((TYPES[0], GRID), {}, r"token_types must be \[batch, seq\], got shape \(6,\)"),
        ((TYPES, GRID), {"spatial_merge_size": 0}, r"spatial_merge_size=0 must be a positive"),
        ((TYPES, GRID), {"advance": "max"}, r"advance='max' is not one of"),
        ((TYPES, GRID), {"tokens_per_second": -1}, r"tokens_per_second=-1 must be a positive"),
        ((TYPES, GRID), {"split_video_frames": 1}, r"split_video_frames=1 must be True or"),
        ((TYPES, GRID), {"split_video_frames": True, "tokens_per_second": 2},
         r"tokens_per_second=2 with split_video_frames"),
        ((np.array([[0, 2, 2, 2, 2, 2, 2, 2, 2, 0]]), None, np.array([[2, 4, 4]])),
         {"split_video_frames": True},
         r"video_grid_thw\[0\]=\[1, 4, 4\] gives t·\(h/2\)·\(w/2\) = 4 tokens but its group"),
        ((TYPES, GRID, None, None, np.ones((1, 5), np.int64)), {},
         r"attention_mask has shape \(1, 5\) but token_types has shape \(1, 6\)"),
        ((TYPES.astype(np.float32), GRID), {},
         r"token_types must be integers \(0 text, 1 image, 2 video, 3 audio\), got dtype"),
        ((VIDEO, None, VIDEO_GRID, np.array([np.nan])), {"tokens_per_second": 2},
         r"second_per_grid_ts\[0\]=nan must be a finite number >= 0"),
        ((VIDEO, None, VIDEO_GRID, np.array([-0.5])), {"position_id_per_seconds": 25},
         r"second_per_grid_ts\[0\]=-0.5 must be a finite number >= 0"),
    ],
)
def test_bad_input_raises_a_parameter_error_naming_it(pe, args, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.mrope_position_ids(*args, **kwargs)


def _inputs(case):
    names = ("token_types", "image_grid_thw", "video_grid_thw", "second_per_grid_ts",
             "attention_mask")
    return {n: case.inputs.get(n) for n in names}


def _split(case):
    batch, seq = case.inputs["token_types"].shape
    n = 3 * batch * seq
    return case.output[:n].reshape(3, batch, seq), case.output[n:].reshape(batch, 1)


def _transformers(case, params):
    """get_rope_index of Qwen2-VL (tokens_per_second null) or Qwen2.5-VL, unbound, on a
    stand-in holding the config: no weights are built."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel

    model = Qwen2VLModel if params["tokens_per_second"] is None else Qwen2_5_VLModel
    if params["split_video_frames"]:
        model = Qwen3VLModel
    vision = pytypes.SimpleNamespace(spatial_merge_size=params["spatial_merge_size"],
                                     tokens_per_second=params["tokens_per_second"])
    stub = pytypes.SimpleNamespace(config=pytypes.SimpleNamespace(vision_config=vision))
    stub.get_vision_position_ids = pytypes.MethodType(model.get_vision_position_ids, stub)
    inputs = {k: None if v is None else torch.tensor(v) for k, v in _inputs(case).items()}
    kwargs = {"image_grid_thw": inputs["image_grid_thw"],
              "video_grid_thw": inputs["video_grid_thw"],
              "attention_mask": inputs["attention_mask"]}
    if model is Qwen2_5_VLModel:
        kwargs["second_per_grid_ts"] = inputs["second_per_grid_ts"]
    ids, deltas = model.get_rope_index(stub, inputs["token_types"], inputs["token_types"],
                                       **kwargs)
    return ids.numpy(), deltas.numpy()


def _vllm(case, params):
    """vLLM's MRotaryEmbedding get_input_positions (and transformers 4.x) per row: text
    arange + st_idx; vision t/h/w index grids + st_idx, temporal (arange(t) · second_per_grid_t
    · tokens_per_second).long(); st_idx = the previous ids' max + 1."""
    torch = pytest.importorskip("torch")
    token_types = case.inputs["token_types"]
    mask = case.inputs["attention_mask"]
    grids = {1: iter([] if case.inputs["image_grid_thw"] is None
                     else case.inputs["image_grid_thw"].tolist()),
             2: iter([] if case.inputs["video_grid_thw"] is None
                     else case.inputs["video_grid_thw"].tolist())}
    seconds = iter([] if case.inputs["second_per_grid_ts"] is None
                   else case.inputs["second_per_grid_ts"].tolist())
    m = params["spatial_merge_size"]
    ids = np.zeros((3, *token_types.shape))
    deltas = np.zeros((token_types.shape[0], 1))
    for b, row in enumerate(token_types):
        keep = np.ones(row.size, bool) if mask is None else mask[b].astype(bool)
        kept = row[keep]
        pieces = []
        i = 0
        while i < kept.size:
            j = i
            while j < kept.size and kept[j] == kept[i]:
                j += 1
            st_idx = pieces[-1].max() + 1 if pieces else 0
            if kept[i] == 0:
                pieces.append(torch.arange(j - i).view(1, -1).expand(3, -1) + st_idx)
            else:
                t, h, w = next(grids[int(kept[i])])
                h, w = h // m, w // m
                second = next(seconds, 1.0) if kept[i] == 2 else 1.0
                tps = params["tokens_per_second"] if kept[i] == 2 else None
                t_index = torch.arange(t).view(-1, 1).expand(-1, h * w)
                if tps is not None:
                    t_index = t_index * second * tps
                t_index = t_index.long().flatten()
                h_index = torch.arange(h).view(1, -1, 1).expand(t, -1, w).flatten()
                w_index = torch.arange(w).view(1, 1, -1).expand(t, h, -1).flatten()
                pieces.append(torch.stack([t_index, h_index, w_index]) + st_idx)
            i = j
        positions = torch.cat(pieces, dim=1)
        ids[:, b, keep] = positions.numpy()
        deltas[b, 0] = int(positions.max()) + 1 - kept.size
    return ids, deltas


def _vl_cases() -> list[str]:
    """The Qwen2-VL / 2.5-VL / 3-VL cases (Qwen2.5-Omni's: tests/per_encoding/test_mrope_omni.py)."""
    spec = specs()["mrope_position_ids"]
    return [c.name for c in spec.cases
            if {**spec.defaults(), **c.params}["position_id_per_seconds"] is None]


@pytest.mark.parametrize("case_name", _vl_cases())
def test_oracles(case_name: str) -> None:
    spec = specs()["mrope_position_ids"]
    case = golden.load(spec).cases[case_name]
    params = {**spec.defaults(), **case.params}
    ids, deltas = _split(case)
    oracle = _transformers if params["advance"] == "max_hw" else _vllm
    expected_ids, expected_deltas = oracle(case, params)
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_array_equal(deltas, expected_deltas)


@pytest.mark.parametrize("case_name", ["qwen2_vl_one_image", "batch_left_padded_two_images",
                                       "text_only"])
def test_transformers_5_agrees_where_the_rules_coincide(case_name: str) -> None:
    """Images, and videos whose temporal ids stay below max(h, w)/m: transformers 5.x's
    get_rope_index gives the golden (advance max_id) ids too."""
    spec = specs()["mrope_position_ids"]
    case = golden.load(spec).cases[case_name]
    ids, deltas = _split(case)
    expected_ids, expected_deltas = _transformers(case, {**spec.defaults(), **case.params})
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_array_equal(deltas, expected_deltas)


def test_transformers_5_overlaps_text_with_a_spaced_video() -> None:
    """Where the rules part: transformers 5.x resumes text at p + max(h, w)/m = 5 after a
    Qwen2.5-VL video whose temporal ids reach 9 (τ = 25 · 0.25): the text id is below the
    video's; Qwen2-VL's rule (the golden) resumes after them at 10."""
    spec = specs()["mrope_position_ids"]
    case = golden.load(spec).cases["qwen2_5_vl_image_and_video_no_merge"]
    ids, _ = _split(case)
    expected_ids, _ = _transformers(case, {**spec.defaults(), **case.params})
    assert ids[:, 0, -1].tolist() == [10, 10, 10]
    assert expected_ids[:, 0, -1].tolist() == [5, 5, 5]
    assert expected_ids[0, 0, -1] < expected_ids[0, 0, :-1].max()
