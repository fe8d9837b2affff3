"""The llama.cpp divergences that a rotation-level comparison cannot settle, settled on what
attention sees: the logits q_m . k_n of each head, at positions up to 32767 apart, for one tiny
checkpoint read by (1) transformers' modeling code and (2) llama.cpp's pipeline (the converter's
own ``modify_tensors`` on the checkpoint's q/k weights, the tensors written to a GGUF and read
back with ``gguf``, the rope mode and width llama.cpp's C++ picks, transcribed here in numpy
float64 and cross-checked against ggml's own rope).

A permutation of a head's features applied to both q and k leaves q . k unchanged, so a
converter's row reorder plus another pairing can be the same attention: only the logits decide.

- glm4v / glm_ocr: the converter's M-RoPE row reorder is exact (logits equal to float64 round-off
  when both read the same width); the divergence is the converter's default width (its
  ``partial_rotary_factor`` defaults to 0.5, transformers' Glm4v / GlmOcr to 1.0).
- pocket_tts: llama.cpp converts Kyutai's original ``in_proj`` rows and pairs consecutive
  features, as Kyutai's reference does; transformers reads rows permuted by its own
  ``PermuteForRope`` and rotates halves: the same logits, a convention.
- hy_v4: the converter keeps the rows and llama.cpp pairs consecutive features, transformers
  rotates halves of the same rows: different logits for the same checkpoint; which one is right
  needs Tencent's reference, which is not available here (docs/known-issues.md).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

POSITIONS = np.array([0, 1, 7, 100, 1000, 4095, 4096, 32767])
CHECKED = POSITIONS <= 4096  # where ggml's float32 angles are within 1e-3 of float64


def _needs_llama_cpp() -> Any:
    pytest.importorskip("ggml")
    if importlib.util.find_spec("gguf") is None:  # not imported here: the converter reads
        pytest.skip("could not import 'gguf'")  # llama.cpp's own gguf-py (its sys.path)
    pytest.importorskip("transformers")
    from posenc.conformance.sweeps import llama_cpp

    if not (llama_cpp.vendor() / "convert_hf_to_gguf.py").exists():
        pytest.skip("no llama.cpp source tree (POSENC_LLAMA_CPP)")
    if str(llama_cpp.vendor()) not in sys.path:
        sys.path.insert(0, str(llama_cpp.vendor()))
    importlib.import_module("conversion").load_all_models()
    return llama_cpp


def _converted(arch: str, config: dict[str, Any], weights: dict[str, np.ndarray],
               folder: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """llama.cpp's converter for ``arch`` on ``config``: its metadata, and each of ``weights``
    (HF name -> array) through its own ``modify_tensors``, written to a GGUF and read back."""
    import gguf
    import torch

    from posenc.conformance.sweeps import llama_cpp
    from posenc.conformance.sweeps.mlx_lm_observer import hub_config

    conversion = importlib.import_module("conversion")
    (folder / "config.json").write_text(json.dumps({**hub_config(config), "architectures": [arch]}))
    model = conversion.get_model_class(arch)(folder, gguf.LlamaFileType.ALL_F32,
                                             folder / "tiny.gguf", eager=True)
    model.set_gguf_parameters()
    for name, array in weights.items():
        bid = int(name.split("layers.")[1].split(".")[0]) if "layers." in name else None
        for new, tensor in model.modify_tensors(torch.from_numpy(array), name, bid):
            model.gguf_writer.add_tensor(new, np.ascontiguousarray(tensor.numpy()))
    meta, reader = llama_cpp.written_and_read(model.gguf_writer, folder / "tiny.gguf")
    tensors = {t.name: np.array(t.data, dtype=np.float64).reshape(
        [int(n) for n in reversed(t.shape)]) for t in reader.tensors}
    return meta, tensors


def _axes(vision: bool) -> np.ndarray:
    """ggml's M-RoPE positions [4, L] (t, h, w, e): a text token's are equal, an image
    patch's differ (h, w on a grid)."""
    if not vision:
        return np.stack([POSITIONS] * 4)
    return np.stack([POSITIONS, POSITIONS // 3 + 2, POSITIONS % 7, 0 * POSITIONS])


def _llama_cpp_rope(x: np.ndarray, mode: str, n_dims: int, base: float,
                    sections: list[int] | None = None, vision: bool = False) -> np.ndarray:
    """ggml's rope (ggml-cpu ops.cpp rope_f32 / the M-RoPE cache) transcribed in float64, x
    [heads, len(POSITIONS), d]: pair i of the first n_dims features turns by
    p * base^(-2i/n_dims), paired (2i, 2i+1) in mode normal, (i, i + n_dims/2) in neox and
    M-RoPE, where p is the position of the axis whose section holds i mod sum(sections)."""
    half = n_dims // 2
    pairs = np.arange(half)
    if sections:
        axis = np.searchsorted(np.cumsum(sections), pairs % sum(sections), side="right")
        p = _axes(vision)[axis].T
    else:
        p = POSITIONS[:, None]
    theta = p * base ** (-2.0 * pairs / n_dims)
    cos, sin = np.cos(theta), np.sin(theta)
    y = x.copy()
    a, b = (np.s_[..., 0:n_dims:2], np.s_[..., 1:n_dims:2]) if mode == "normal" else \
        (np.s_[..., :half], np.s_[..., half:n_dims])
    y[a] = x[a] * cos - x[b] * sin
    y[b] = x[a] * sin + x[b] * cos
    return y


def _ggml(x: np.ndarray, mode: str, n_dims: int, base: float,
          sections: list[int] | None = None, vision: bool = False) -> np.ndarray:
    from posenc.backends.peers.ggml import ggml_rope

    pos = _axes(vision) if sections else POSITIONS
    return np.asarray(ggml_rope(x.astype(np.float32), pos, n_dims=n_dims, mode=mode,
                                freq_base=base, sections=sections), dtype=np.float64)


def _logits(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """q [H, L, d], k [Hkv, L, d] -> [H, L, L] logits, each kv head shared by H / Hkv heads."""
    k = np.repeat(k, q.shape[0] // k.shape[0], axis=0)
    return np.einsum("hmd,hnd->hmn", q, k)


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def _cos_sin(theta: np.ndarray) -> tuple[Any, Any]:
    """float64 cos/sin in the [1, L, d] layout transformers' rotary modules return."""
    import torch

    return torch.from_numpy(np.cos(theta))[None], torch.from_numpy(np.sin(theta))[None]


# -- glm4v / glm_ocr -------------------------------------------------------------------------
def _glm_case(family: str, rope: dict[str, Any], vision: bool = False) -> dict[str, Any]:
    """Both pipelines' logits for a tiny ``family`` (glm4v or glm_ocr) text config with
    ``rope`` as its rope_parameters, at text positions or (``vision``) image-patch ones."""
    import tempfile

    import torch

    llama_cpp = _needs_llama_cpp()
    from posenc.conformance.sweeps.mlx_lm_observer import tiny
    from posenc.conformance.sweeps.transformers_families import discover

    cfg, config, _ = tiny(discover([family])[0])
    config = {**config, "rope_parameters": {**config["rope_parameters"], **rope}}
    cfg = type(cfg).from_dict(config)
    heads, kv, hidden = config["num_attention_heads"], config["num_key_value_heads"], \
        config["hidden_size"]
    d = hidden // heads
    rng = np.random.default_rng(7)
    h = rng.standard_normal((len(POSITIONS), hidden))
    wq, bq = rng.standard_normal((heads * d, hidden)), rng.standard_normal(heads * d)
    wk, bk = rng.standard_normal((kv * d, hidden)), rng.standard_normal(kv * d)
    q = (h @ wq.T + bq).reshape(len(POSITIONS), heads, d).transpose(1, 0, 2)
    k = (h @ wk.T + bk).reshape(len(POSITIONS), kv, d).transpose(1, 0, 2)
    # transformers: its rotary's frequency layout and its apply_rotary_pos_emb, in float64
    modeling = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    rotary = next(getattr(modeling, n) for n in dir(modeling) if n.endswith("TextRotaryEmbedding"))(cfg)
    width = int(d * rope.get("partial_rotary_factor", 1.0))
    inv = float(config["rope_parameters"]["rope_theta"]) ** (-np.arange(0, width, 2) / width)
    assert np.allclose(rotary.inv_freq.numpy(), inv, rtol=1e-6)  # its formula, in float64
    freqs = torch.from_numpy(_axes(vision)[:3, None, :, None] * inv)
    cos = rotary.recomposition_frequencies(freqs.cos())
    sin = rotary.recomposition_frequencies(freqs.sin())
    qt, kt = modeling.apply_rotary_pos_emb(torch.from_numpy(q)[None], torch.from_numpy(k)[None],
                                           cos, sin)
    # llama.cpp: the converter's rows, its width, M-RoPE
    arch = "Glm4vForConditionalGeneration" if family == "glm4v" else "GlmOcrForConditionalGeneration"
    with tempfile.TemporaryDirectory() as folder:
        meta, tensors = _converted(arch, config, {
            "model.layers.0.self_attn.q_proj.weight": wq, "model.layers.0.self_attn.q_proj.bias": bq,
            "model.layers.0.self_attn.k_proj.weight": wk, "model.layers.0.self_attn.k_proj.bias": bk},
            Path(folder))
    gq = (h @ tensors["blk.0.attn_q.weight"].T + tensors["blk.0.attn_q.bias"]).reshape(
        len(POSITIONS), heads, d).transpose(1, 0, 2)
    gk = (h @ tensors["blk.0.attn_k.weight"].T + tensors["blk.0.attn_k.bias"]).reshape(
        len(POSITIONS), kv, d).transpose(1, 0, 2)
    n_rot, base = int(meta["glm4.rope.dimension_count"]), float(meta["glm4.rope.freq_base"])
    sections = [int(s) for s in meta["glm4.rope.dimension_sections"]]
    assert llama_cpp.source.rope_mode("glm4", *_source_tables(llama_cpp), sections) == "mrope"
    return {"transformers": _logits(qt[0].numpy(), kt[0].numpy()),
            "llama.cpp": _logits(_llama_cpp_rope(gq, "mrope", n_rot, base, sections, vision),
                                 _llama_cpp_rope(gk, "mrope", n_rot, base, sections, vision)),
            "ggml": _logits(_ggml(gq, "mrope", n_rot, base, sections, vision),
                            _ggml(gk, "mrope", n_rot, base, sections, vision)),
            "n_rot": n_rot, "head": d}


def _source_tables(llama_cpp: Any) -> tuple[dict[str, Any], dict[str, str]]:
    src = llama_cpp.vendor() / "src"
    return (llama_cpp.source.rope_types((src / "llama-model.cpp").read_text(encoding="utf-8")),
            llama_cpp.source.arch_names((src / "llama-arch.cpp").read_text(encoding="utf-8")))


@pytest.mark.parametrize("vision", [False, True])
@pytest.mark.parametrize("family", ["glm4v", "glm_ocr"])
def test_glm_m_rope_row_reorder_is_a_convention_at_the_same_width(family: str,
                                                                  vision: bool) -> None:
    """With the width written in the config (published GLM-4.1V configs carry
    partial_rotary_factor 0.5), the converter's normal_to_neox row reorder plus ggml's M-RoPE
    give transformers' logits, for text tokens and for image patches (t, h, w apart): the
    reorder is exact."""
    got = _glm_case(family, {"partial_rotary_factor": 0.5, "mrope_section": [2, 1, 1]}, vision)
    assert got["n_rot"] == got["head"] // 2
    assert _relative(got["llama.cpp"], got["transformers"]) < 1e-10
    assert _relative(got["ggml"][:, CHECKED][:, :, CHECKED],
                     got["transformers"][:, CHECKED][:, :, CHECKED]) < 1e-4


@pytest.mark.parametrize("family", ["glm4v", "glm_ocr"])
def test_glm_converter_rotates_half_the_head_where_transformers_rotates_it_all(
        family: str) -> None:
    """docs/known-issues.md: without partial_rotary_factor, transformers' Glm4v / GlmOcr rotate
    the whole head and llama.cpp's Glm4Model converter writes half of it
    (rope_parameters.get("partial_rotary_factor", 0.5)): the logits differ by O(1)."""
    got = _glm_case(family, {})
    assert got["n_rot"] == got["head"] // 2
    assert _relative(got["llama.cpp"], got["transformers"]) > 0.1
    # ggml's own rope agrees with the float64 transcription of what llama.cpp runs
    assert _relative(got["ggml"][:, CHECKED][:, :, CHECKED],
                     got["llama.cpp"][:, CHECKED][:, :, CHECKED]) < 1e-4


# -- pocket_tts ------------------------------------------------------------------------------
def _kyutai_rope(x: np.ndarray, max_period: float) -> np.ndarray:
    """Kyutai's reference (pocket_tts/modules/rope.py apply_rope) in float64: each head viewed as
    D/2 complex numbers (x[2i], x[2i+1]), multiplied by exp(i t max_period^(-2i/D))."""
    d = x.shape[-1]
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(
        1j * POSITIONS[:, None] * np.exp(np.arange(d // 2) * (-np.log(max_period) * 2 / d)))
    return np.stack([z.real, z.imag], axis=-1).reshape(x.shape)


def _pocket_case() -> dict[str, Any]:
    """One original (Kyutai-format) in_proj read by Kyutai's reference, by llama.cpp's converter
    and graph, and by transformers after its own PermuteForRope (interleaved -> rotate-half)."""
    import tempfile

    import torch
    from transformers.core_model_loading import PermuteForRope

    llama_cpp = _needs_llama_cpp()
    from posenc.conformance.sweeps.mlx_lm_observer import tiny
    from posenc.conformance.sweeps.transformers_families import discover

    cfg, config, _ = tiny(discover(["pocket_tts"])[0])
    config = {**config, "num_key_value_heads": config["num_attention_heads"]}  # Kyutai's MHA
    cfg = type(cfg).from_dict(config)
    heads, hidden, d = config["num_attention_heads"], config["hidden_size"], config["head_dim"]
    base = float(config["rope_parameters"]["rope_theta"])
    rng = np.random.default_rng(11)
    in_proj = rng.standard_normal((3 * heads * d, hidden))
    h = rng.standard_normal((len(POSITIONS), hidden))

    def per_head(w: np.ndarray) -> np.ndarray:
        return (h @ w.T).reshape(len(POSITIONS), heads, d).transpose(1, 0, 2)

    wq, wk, _ = np.split(in_proj, 3)
    out = {"kyutai": _logits(_kyutai_rope(per_head(wq), base), _kyutai_rope(per_head(wk), base))}
    # transformers: the rows its PermuteForRope writes, its apply_rotary_pos_emb (rotate_half)
    modeling = importlib.import_module("transformers.models.pocket_tts.modeling_pocket_tts")
    permute = PermuteForRope(permute_layer_names=["q_proj", "k_proj"])
    hf = {n: permute.convert({n: [torch.from_numpy(w)]}, [n], [n], cfg)[n].numpy()
          for n, w in (("q_proj", wq), ("k_proj", wk))}
    inv = base ** (-np.arange(0, d, 2) / d)
    assert np.allclose(modeling.PocketTTSRotaryEmbedding(cfg).inv_freq.numpy(), inv, rtol=1e-6)
    theta = np.concatenate([POSITIONS[:, None] * inv] * 2, axis=-1)
    qt, kt = modeling.apply_rotary_pos_emb(torch.from_numpy(per_head(hf["q_proj"]))[None],
                                           torch.from_numpy(per_head(hf["k_proj"]))[None],
                                           *_cos_sin(theta))
    out["transformers"] = _logits(qt[0].numpy(), kt[0].numpy())
    # llama.cpp: PocketTTSModel.modify_tensors on the original name, the GGUF read back
    with tempfile.TemporaryDirectory() as folder:
        meta, tensors = _converted("PocketTTSModel", config, {
            "flow_lm.transformer.layers.0.self_attn.in_proj.weight": in_proj}, Path(folder))
    arch = meta["general.architecture"]
    mode = llama_cpp.source.rope_mode(arch, *_source_tables(llama_cpp), None)
    n_rot = int(meta.get(f"{arch}.rope.dimension_count", d))
    gq, gk = per_head(tensors["blk.0.attn_q.weight"]), per_head(tensors["blk.0.attn_k.weight"])
    out["llama.cpp"] = _logits(_llama_cpp_rope(gq, mode, n_rot, base),
                               _llama_cpp_rope(gk, mode, n_rot, base))
    out["ggml"] = _logits(_ggml(gq, mode, n_rot, base), _ggml(gk, mode, n_rot, base))
    out["mode"], out["sweep's reading"] = mode, _logits(  # rows as transformers holds them
        _llama_cpp_rope(per_head(hf["q_proj"]), mode, n_rot, base),
        _llama_cpp_rope(per_head(hf["k_proj"]), mode, n_rot, base))
    return out


def test_pocket_tts_consecutive_pairs_on_kyutais_rows_are_transformers_attention() -> None:
    """pocket_tts: llama.cpp converts Kyutai's checkpoint (rows unpermuted) and rotates
    consecutive pairs (LLAMA_ROPE_TYPE_NORM), as Kyutai's reference does; transformers rotates
    halves of rows its PermuteForRope reorders. The logits are equal: a convention. The
    sweep's divergence came from applying llama.cpp's pairing to transformers' rows."""
    got = _pocket_case()
    assert got["mode"] == "normal"
    assert _relative(got["llama.cpp"], got["kyutai"]) < 1e-10
    assert _relative(got["transformers"], got["kyutai"]) < 1e-10
    assert _relative(got["ggml"], got["llama.cpp"]) < 1e-4
    assert _relative(got["sweep's reading"], got["kyutai"]) > 0.1  # the false alarm, named


# -- hy_v4 -----------------------------------------------------------------------------------
def _hy_v4_case() -> dict[str, Any]:
    """The rope part of HY_V4's MLA logits (q_pe . k_pe) for one q_b_proj and one
    kv_a_proj_with_mqa, read by transformers (rotate_half) and by llama.cpp (the converter's
    rows, LLAMA_ROPE_TYPE_NORM)."""
    import tempfile

    import torch

    llama_cpp = _needs_llama_cpp()
    from posenc.conformance.sweeps.mlx_lm_observer import tiny
    from posenc.conformance.sweeps.transformers_families import discover

    cfg, config, _ = tiny(discover(["hy_v4"])[0])
    heads, rope, nope = (config["num_attention_heads"], config["qk_rope_head_dim"],
                         config["qk_nope_head_dim"])
    lora, kv_lora, hidden = config["q_lora_rank"], config["kv_lora_rank"], config["hidden_size"]
    base = float(config["rope_parameters"]["rope_theta"])
    rng = np.random.default_rng(13)
    q_b = rng.standard_normal((heads * (nope + rope), lora))
    kv_a = rng.standard_normal((kv_lora + rope, hidden))
    q_in, h = rng.standard_normal((len(POSITIONS), lora)), rng.standard_normal((len(POSITIONS), hidden))

    def rope_parts(wq: np.ndarray, wkv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q = (q_in @ wq.T).reshape(len(POSITIONS), heads, nope + rope).transpose(1, 0, 2)
        return q[..., nope:], (h @ wkv.T)[None, :, kv_lora:]

    modeling = importlib.import_module("transformers.models.hy_v4.modeling_hy_v4")
    inv = base ** (-np.arange(0, rope, 2) / rope)
    assert np.allclose(modeling.HYV4RotaryEmbedding(cfg).inv_freq.numpy(), inv, rtol=1e-6)
    q, k = rope_parts(q_b, kv_a)
    theta = np.concatenate([POSITIONS[:, None] * inv] * 2, axis=-1)
    qt, kt = modeling.apply_rotary_pos_emb(torch.from_numpy(q)[None], torch.from_numpy(k)[None],
                                           *_cos_sin(theta))
    with tempfile.TemporaryDirectory() as folder:
        meta, tensors = _converted("HYV4ForCausalLM", config, {
            "model.layers.0.self_attn.q_b_proj.weight": q_b,
            "model.layers.0.self_attn.kv_a_proj_with_mqa.weight": kv_a}, Path(folder))
    arch = meta["general.architecture"]
    mode = llama_cpp.source.rope_mode(arch, *_source_tables(llama_cpp), None)
    n_rot = int(meta[f"{arch}.rope.dimension_count"])
    gq, gk = rope_parts(tensors["blk.0.attn_q_b.weight"], tensors["blk.0.attn_kv_a_mqa.weight"])
    return {"transformers": _logits(qt[0].numpy(), kt[0].numpy()), "mode": mode, "n_rot": n_rot,
            "rope": rope, "rows kept": bool(np.array_equal(gq, q) and np.array_equal(gk, k)),
            "llama.cpp": _logits(_llama_cpp_rope(gq, mode, n_rot, base),
                                 _llama_cpp_rope(gk, mode, n_rot, base)),
            "ggml": _logits(_ggml(gq, mode, n_rot, base), _ggml(gk, mode, n_rot, base))}


def test_hy_v4_pairs_the_same_rows_otherwise_than_transformers() -> None:
    """hy_v4 (unsettled, docs/known-issues.md): the converter keeps q_b_proj's and
    kv_a_proj_with_mqa's rows and llama.cpp pairs consecutive features; transformers' HYV4
    rotates halves of the same rows (its checkpoint mapping only renames). The logits differ
    by O(1) for the same checkpoint, so this is no convention: one of the two is wrong, and
    only Tencent's reference can say which."""
    got = _hy_v4_case()
    assert got["mode"] == "normal" and got["rows kept"] and got["n_rot"] == got["rope"]
    assert _relative(got["ggml"], got["llama.cpp"]) < 1e-4
    assert _relative(got["llama.cpp"], got["transformers"]) > 0.1
