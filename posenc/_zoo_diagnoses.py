"""Diagnosis transforms of the 2024–26 model-zoo encodings (NoPE, query temperature, layer
schedules, MLA, vision and multimodal rope): registered into :data:`posenc.diagnoses.TRANSFORMS`."""

from __future__ import annotations

from typing import Any

import numpy as np

from .diagnoses import Arrays, Reference, Transform, _call, _positions


def _rope_on_nope(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    from .reference.rope import rope

    x = np.asarray(_call(ref, inputs, params))
    return rope(x, _positions(inputs), base=10000.0, layout="half", rotary_dim=None,
                scaling=None, seq_len=None)


def _position_ids_for_cache(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    """Llama 4's form driven by each batch row's position ids (row by row)."""
    ids = inputs.get("position_ids")
    if ids is None:
        return _call(ref, inputs, params)
    rows = [_call(ref, {"cache_position": row, "position_ids": None}, params)
            for row in np.asarray(ids)]
    return np.stack(rows)


def _without_plus_one(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    """floor(cache_position / F): Ministral 3's form over the cache positions."""
    out = np.asarray(_call(ref, {**inputs, "position_ids": None},
                           {**params, "form": "ministral3"}))
    ids = inputs.get("position_ids")
    return out if ids is None else np.broadcast_to(out, np.shape(ids)).copy()


def _frames_at_one_second(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    """Video temporal ids without second_per_grid_ts (every temporal patch 1 s)."""
    return _call(ref, {**inputs, "second_per_grid_ts": None}, params)


# -- layer schedules ---------------------------------------------------------------------------
def _text(config: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """(the text config, a function putting a changed text config back into config)."""
    if "text_config" in config:
        return dict(config["text_config"]), lambda text: {**config, "text_config": text}
    return dict(config), lambda text: text


def _with_config(change: Any) -> Any:
    def apply(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
        text, put_back = _text(params["config"])
        return _call(ref, inputs, {**params, "config": put_back(change(text))})
    return apply


def _inverted_flags(text: dict[str, Any]) -> dict[str, Any]:
    n = text["num_hidden_layers"]
    flags = text.get("no_rope_layers")
    if not flags:
        interval = text.get("no_rope_layer_interval", 4)
        flags = [int((i + 1) % interval != 0) for i in range(n)]
    if "no_rope_layers" not in text and "no_rope_layer_interval" not in text and text.get(
            "model_type", "") not in ("smollm3", "llama4_text", ""):
        return text  # a model without the flags (Gemma 3, Cohere2): nothing to invert
    return {**text, "no_rope_layers": [1 - int(f) for f in flags]}


def _pattern_off_by_one(text: dict[str, Any]) -> dict[str, Any]:
    if text.get("layer_types") or "no_rope_layers" in text:
        return text
    default = {"gemma3_text": 6, "cohere2": 4}.get(text.get("model_type", "gemma3_text"))
    if default is None:
        return text
    pattern = text.get("sliding_window_pattern", default)
    types = ["sliding_attention" if i % pattern else "full_attention"
             for i in range(text["num_hidden_layers"])]
    return {**text, "layer_types": types}


def _gemma3_copy(columns: tuple[int, ...]) -> Any:
    """Gemma 3's sliding rows take the full rows' values in ``columns``."""
    def apply(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
        out = np.array(_call(ref, inputs, params))
        text, _ = _text(params["config"])
        if text.get("model_type", "gemma3_text") != "gemma3_text":
            return out
        full, sliding = out[:, 1] == 0, out[:, 1] == 1
        if full.any():
            for c in columns:
                out[sliding, c] = out[full][0, c]
        return out
    return apply


def _cohere2_rope_everywhere(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    out = np.array(_call(ref, inputs, params))
    if params["config"].get("model_type") != "cohere2" or not out[:, 0].any():
        return out
    rope = out[out[:, 0] == 1][0]
    nope = out[:, 0] == 0
    out[nope, 0], out[nope, 2:] = 1.0, rope[2:]
    return out


# -- MLA ---------------------------------------------------------------------------------------
def _mla_leading_slice(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    """q's first r features rotated: move them last, rotate, move them back."""
    q = np.asarray(inputs["q"])
    r = np.asarray(inputs["k_rot"]).shape[-1]
    moved = np.concatenate([q[..., r:], q[..., :r]], axis=-1)
    q_out, k_out, scale = _call(ref, {**inputs, "q": moved}, params)
    nope = q.shape[-1] - r
    return np.concatenate([q_out[..., nope:], q_out[..., :nope]], axis=-1), k_out, scale


def _mla_scale(power: int) -> Any:
    def apply(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
        q_out, k_out, _ = _call(ref, inputs, params)
        scale = np.asarray(inputs["q"]).shape[-1] ** -0.5
        scaling = params.get("scaling") or {}
        factor, m = scaling.get("factor") or 1.0, scaling.get("mscale_all_dim") or 0.0
        if power and m and factor > 1:
            scale *= (0.1 * m * np.log(factor) + 1.0) ** power
        return q_out, k_out, scale
    return apply


# -- 2-D vision rope ---------------------------------------------------------------------------
def _grid(inputs: Arrays, params: dict[str, Any]) -> np.ndarray:
    """positions as [seq, 2] (row, column); flat ids split by params['max_width']."""
    positions = np.asarray(inputs["positions"])
    if positions.ndim == 1:
        width = params["max_width"]
        return np.stack([positions // width, positions % width], axis=1)
    return positions


def _pixtral_as_axial(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    from .reference.axial_rope import axial_rope

    x = np.asarray(inputs["x"])
    half = x.shape[-1] // 2
    return axial_rope(x, _grid(inputs, params), axes_dims=[half, half], base=params["base"],
                      layout="half")


def _axes_swapped(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    grid = _grid(inputs, params)
    swapped = np.where(grid < 0, grid, grid[:, ::-1])  # a CLS marker stays one
    return _call(ref, {**inputs, "positions": swapped}, params)


def _cls_at_origin(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    return _call(ref, {**inputs, "positions": np.maximum(np.asarray(inputs["positions"]), 0)},
                 params)


def _gemma4_last_as_pattern(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    out = np.array(_call(ref, inputs, params))
    text, _ = _text(params["config"])
    if text.get("model_type", "gemma4_text") != "gemma4_text":
        return out
    n = text["num_hidden_layers"]
    types = text.get("layer_types") or [
        "sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(n)]
    sliding = np.flatnonzero(out[:-1, 1] == 1)
    if types[-1] == "sliding_attention" and sliding.size:
        out[-1] = out[sliding[0]]
    return out


# -- dual chunk attention ----------------------------------------------------------------------
def _dca_with(change: Any) -> Any:
    """The reference's rotations at DCA positions altered by ``change(positions, params)``."""
    def apply(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
        from .reference import dual_chunk_attention as dca

        p = dca.default_positions(inputs["q"], inputs.get("positions"))
        chunk = change(p, params)
        return dca.embed(inputs["q"], inputs["k"], chunk, base=params["base"],
                         layout=params["layout"], rotary_dim=params["rotary_dim"])
    return apply


def _dca_local_size(by: int) -> Any:
    def change(p: np.ndarray, params: dict[str, Any]) -> Any:
        from .reference.dual_chunk_attention import chunk_positions

        return chunk_positions(p, params["chunk_size"], params["local_size"] + by,
                               params["critical"])
    return change


def _dca_clamp_exclusive(p: np.ndarray, params: dict[str, Any]) -> Any:
    from .reference.dual_chunk_attention import chunk_positions

    intra, succ, inter, key = chunk_positions(p, params["chunk_size"], params["local_size"],
                                              params["critical"])
    top = params["chunk_size"] - 1
    return intra, np.minimum(succ, top), np.minimum(inter, top), key


def _dca_inter_from_intra(p: np.ndarray, params: dict[str, Any]) -> Any:
    from .reference.dual_chunk_attention import chunk_positions

    intra, succ, inter, key = chunk_positions(p, params["chunk_size"], params["local_size"],
                                              params["critical"])
    return intra, succ, np.full_like(inter, params["chunk_size"] - params["local_size"] - 1), key


# -- FoPE ------------------------------------------------------------------------------------
def _fope_transposed(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    swapped = {name: np.swapaxes(np.asarray(inputs[name]), -1, -2)
               for name in ("cos_coef", "sin_coef")}
    return _call(ref, {**inputs, **swapped}, params)


def _fope_kept(inputs: Arrays, params: dict[str, Any]) -> int:
    from .reference.fope import kept_frequencies

    return len(kept_frequencies(_fope_ladder(inputs, params), params["base"],
                                params["max_position_embeddings"], params["num_inv_freq"]))


def _fope_ladder(inputs: Arrays, params: dict[str, Any]) -> int:
    """The width of the frequency ladder: rotary_dim, else the head."""
    return params.get("rotary_dim") or np.asarray(inputs["x"]).shape[-1]


def _fope_sin_one(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    x = np.asarray(inputs["x"], dtype=np.float64)
    out = np.array(_call(ref, inputs, params))
    half, kept = x.shape[-1] // 2, _fope_kept(inputs, params)
    clipped = np.arange(kept, half)
    out[..., clipped] = x[..., clipped] - x[..., clipped + half]
    out[..., clipped + half] = x[..., clipped + half] + x[..., clipped]
    return out


def _fope_no_floor(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    half, kept = _fope_ladder(inputs, params) // 2, _fope_kept(inputs, params)
    grown = {}
    for name in ("cos_coef", "sin_coef"):
        coef = np.asarray(inputs[name], dtype=np.float64)
        full = np.broadcast_to(np.eye(half), (*coef.shape[:-2], half, half)).copy()
        full[..., :kept, :kept] = coef
        grown[name] = full
    return _call(ref, {**inputs, **grown}, {**params, "num_inv_freq": half})


def _fope_first_head(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
    first = {name: np.asarray(inputs[name])[:1] if np.ndim(inputs[name]) == 3
             else inputs[name] for name in ("cos_coef", "sin_coef")}
    return _call(ref, {**inputs, **first}, params)


TRANSFORMS: dict[str, Transform] = {
    "frames_at_one_second": Transform(
        "second_per_grid_ts dropped (1 s a temporal patch)", _frames_at_one_second,
        inputs=("second_per_grid_ts",), modules=("mrope_position_ids",)),
    "rope_on_nope_layer": Transform("RoPE (theta 10000, half) applied", _rope_on_nope,
                                    inputs=("x",), modules=("nope",)),
    "position_ids_for_cache_position": Transform(
        "position_ids in place of cache_position", _position_ids_for_cache,
        inputs=("cache_position", "position_ids"), modules=("query_temperature",)),
    "temperature_without_plus_one": Transform(
        "floor(cache_position / F)", _without_plus_one, inputs=("cache_position",),
        params=("form",), modules=("query_temperature",)),
    "no_rope_flags_inverted": Transform(
        "no_rope_layers inverted", _with_config(_inverted_flags), params=("config",),
        modules=("layer_schedule",)),
    "gemma3_scaling_on_sliding_layers": Transform(
        "the full layers' rope_scaling on the sliding layers", _gemma3_copy((2, 4)),
        params=("config",), modules=("layer_schedule",)),
    "gemma3_global_theta_on_sliding_layers": Transform(
        "rope_theta on the sliding layers", _gemma3_copy((3,)), params=("config",),
        modules=("layer_schedule",)),
    "sliding_pattern_off_by_one": Transform(
        "layer i full when i mod P = 0", _with_config(_pattern_off_by_one), params=("config",),
        modules=("layer_schedule",)),
    "gemma4_last_layer_as_pattern": Transform(
        "the last layer as the pattern says", _gemma4_last_as_pattern, params=("config",),
        modules=("layer_schedule",)),
    "cohere2_rope_on_every_layer": Transform(
        "rope on the global layers too", _cohere2_rope_everywhere, params=("config",),
        modules=("layer_schedule",)),
    "mla_rope_on_leading_slice": Transform(
        "rope on q's first qk_rope_head_dim features", _mla_leading_slice,
        inputs=("q", "k_rot"), modules=("mla_rope",)),
    "mla_mscale_once": Transform("softmax scale × mscale (not squared)", _mla_scale(1),
                                 inputs=("q",), params=("scaling",), modules=("mla_rope",)),
    "mla_mscale_missing": Transform("softmax scale qk_head_dim^-0.5", _mla_scale(0),
                                    inputs=("q",), params=("scaling",), modules=("mla_rope",)),
    "pixtral_as_axial": Transform("axial_rope with axes_dims [d/2, d/2]", _pixtral_as_axial,
                                  inputs=("x", "positions"), modules=("pixtral_rope",)),
    "grid_axes_swapped": Transform("(column, row) coordinates", _axes_swapped,
                                   inputs=("positions",)),
    "cls_at_origin": Transform("the CLS token at grid (0, 0)", _cls_at_origin,
                               inputs=("positions",), modules=("llama4_vision_rope",)),
    "dca_local_size_plus_one": Transform(
        "chunk length chunk_size - local_size - 1", _dca_with(_dca_local_size(1)),
        inputs=("q", "k"), params=("chunk_size", "local_size"),
        modules=("dual_chunk_attention",)),
    "dca_local_size_minus_one": Transform(
        "chunk length chunk_size - local_size + 1", _dca_with(_dca_local_size(-1)),
        inputs=("q", "k"), params=("chunk_size", "local_size"),
        modules=("dual_chunk_attention",)),
    "dca_clamp_exclusive": Transform(
        "query positions clamped at chunk_size - 1", _dca_with(_dca_clamp_exclusive),
        inputs=("q", "k"), params=("chunk_size",), modules=("dual_chunk_attention",)),
    "dca_inter_from_intra_table": Transform(
        "q_inter at chunk_size - local_size - 1", _dca_with(_dca_inter_from_intra),
        inputs=("q", "k"), params=("chunk_size", "local_size"),
        modules=("dual_chunk_attention",)),
    "fope_coefficients_transposed": Transform(
        "cos_coef and sin_coef transposed", _fope_transposed,
        inputs=("cos_coef", "sin_coef"), modules=("fope",)),
    "fope_sin_padded_with_one": Transform(
        "the clipped pairs' sin padded with 1", _fope_sin_one, inputs=("x",),
        params=("base", "max_position_embeddings", "num_inv_freq"), modules=("fope",)),
    "fope_floor_not_applied": Transform(
        "every frequency kept (identity coefficients past the floor)", _fope_no_floor,
        inputs=("x", "cos_coef", "sin_coef"),
        params=("base", "max_position_embeddings", "num_inv_freq"), modules=("fope",)),
    "fope_first_head_for_all": Transform(
        "coefficient head 0 for every head", _fope_first_head,
        inputs=("cos_coef", "sin_coef"), modules=("fope",)),
}
