"""Pixtral and Llama 4 vision rope: bad inputs on every backend, and every golden against
transformers' PixtralVisionRotaryEmbedding + apply_rotary_pos_emb and
Llama4VisionRotaryEmbedding + vision_apply_rotary_emb."""

from __future__ import annotations

import numpy as np
import pytest

from posenc import golden
from posenc.catalog import specs
from posenc.errors import ParameterError

X = np.linspace(-1, 1, 6 * 16).reshape(6, 16)
GRID = np.stack(np.meshgrid(np.arange(2), np.arange(3), indexing="ij"), -1).reshape(6, 2)


@pytest.mark.parametrize("function", ["pixtral_rope", "llama4_vision_rope"])
@pytest.mark.parametrize(
    ("x", "positions", "message"),
    [
        (X[:, :14], GRID, r"x.shape\[-1\]=14 must be a positive multiple of 4"),
        (X[0], GRID, r"x must have shape \[..., seq, dim\], got shape \(16,\)"),
        (X, GRID[:5], r"positions has shape \(5, 2\): it must be \[seq, 2\] = \[6, 2\]"),
        (X, np.zeros((6, 3), np.int64), r"positions has shape \(6, 3\)"),
        (X, GRID * 1.0, r"positions must have an integer dtype, got float"),
        (X, None, r"positions=None: 2-D rope needs \[seq, 2\] grid coordinates"),
    ],
)
def test_bad_input_raises_a_parameter_error_naming_it(pe, function, x, positions, message) -> None:
    with pytest.raises(ParameterError, match=message):
        getattr(pe, function)(x, positions)


@pytest.mark.parametrize(
    ("kwargs", "positions", "message"),
    [
        ({}, np.arange(6), r"positions are flat ids \[seq\]: pass max_width"),
        ({"max_width": 0}, np.arange(6), r"max_width=0 must be >= 1"),
        ({"max_width": 2.0}, np.arange(6), r"max_width must be an int, got 2.0 \(float\)"),
        ({"max_width": 3}, np.arange(5), r"positions has shape \(5,\) but x has 6 tokens"),
        ({"max_width": 3}, np.arange(6) * 1.0, r"positions must have an integer dtype"),
    ],
)
def test_pixtral_flat_ids_bad_inputs(pe, kwargs, positions, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.pixtral_rope(X, positions, **kwargs)


def _golden(spec_id: str):
    spec = specs()[spec_id]
    return spec, golden.load(spec).cases


def _pairs_to_half(d: int) -> np.ndarray:
    """The gather taking features paired (2j, 2j+1) to pairs (j, j + d/2)."""
    return np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])


def test_oracle_transformers_pixtral() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.models.pixtral.configuration_pixtral import PixtralVisionConfig
    from transformers.models.pixtral.modeling_pixtral import (
        PixtralVisionRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    spec, cases = _golden("pixtral_rope")
    for case in cases.values():
        params = {**spec.defaults(), **case.params}
        x, positions = case.inputs["x"], case.inputs["positions"]
        d = x.shape[-1]
        if positions.ndim == 1:  # transformers 4.x flat ids: row * max_width + column
            width = params["max_width"]
            positions = np.stack([positions // width, positions % width], axis=1)
        config = PixtralVisionConfig(hidden_size=2 * d, num_attention_heads=2, head_dim=d,
                                     rope_parameters={"rope_type": "axial",
                                                      "rope_theta": params["base"]})
        rotary = PixtralVisionRotaryEmbedding(config)
        to_half = _pairs_to_half(d) if params["layout"] == "interleaved" else np.arange(d)
        t = torch.tensor(x[..., to_half], dtype=torch.float32)  # transformers pairs (j, j + d/2)
        cos, sin = rotary(t, torch.tensor(positions))
        query, _ = apply_rotary_pos_emb(t, t, cos, sin, unsqueeze_dim=0)
        expected = np.empty(x.shape)
        expected[..., to_half] = query.double().numpy().reshape(x.shape)
        top = float(np.abs(positions).max()) + 1
        np.testing.assert_allclose(case.output, expected, rtol=0,
                                   atol=2e-6 + 4 * top * 2.0**-24 * float(np.abs(x).max()),
                                   err_msg=case.name)


def test_oracle_transformers_llama4_vision() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.models.llama4.configuration_llama4 import Llama4VisionConfig
    from transformers.models.llama4.modeling_llama4 import (
        Llama4VisionRotaryEmbedding,
        vision_apply_rotary_emb,
    )

    spec, cases = _golden("llama4_vision_rope")
    for case in cases.values():
        params = {**spec.defaults(), **case.params}
        x, positions = case.inputs["x"], case.inputs["positions"]
        d = x.shape[-1]
        side = int(positions.max()) + 1
        config = Llama4VisionConfig(image_size=side * 14, patch_size=14, hidden_size=2 * d,
                                    num_attention_heads=2,
                                    rope_parameters={"rope_type": "default",
                                                     "rope_theta": params["base"]})
        freqs_ci = Llama4VisionRotaryEmbedding(config).freqs_ci  # [side² + 1 (CLS last), 1, d/2]
        rows = [side * side if r < 0 else r * side + c for r, c in positions]
        to_half = _pairs_to_half(d) if params["layout"] == "half" else np.arange(d)
        interleaved = np.empty(x.shape)
        interleaved[..., to_half] = x  # transformers pairs (2j, 2j+1)
        t = torch.tensor(interleaved.reshape(-1, x.shape[-2], d), dtype=torch.float32)[:, :, None]
        query, _ = vision_apply_rotary_emb(t, t, freqs_ci[rows])
        expected = query[:, :, 0].double().numpy().reshape(x.shape)[..., to_half]
        np.testing.assert_allclose(case.output, expected, rtol=0,
                                   atol=4e-6 * float(np.abs(x).max()), err_msg=case.name)
