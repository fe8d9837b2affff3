"""``posenc sweep llama.cpp``: the rope llama.cpp runs for each family, as its own converter and
its own C++ decide it.

The route (issue 40 offered two; this one was chosen): **converter, GGUF metadata, ggml op**.
Building llama-cpp-python from source to run a whole model would need a tokenizer and weights
each converted model can load; the rope a llama.cpp model runs is decided by three pieces of
llama.cpp that this route runs or reads as they are:

1. **the converter**: llama.cpp's ``convert_hf_to_gguf.py`` as vendored in llama-cpp-python
   0.3.36's sdist (its ``conversion`` package: the model class registered for the family's
   HF architecture). The family's shrunk transformers config (the transformers sweep's
   ``tiny_config``) is saved as ``config.json`` in a temporary folder, no weights; only the
   converter's metadata step runs (``set_gguf_parameters()`` and ``generate_extra_tensors()``,
   which writes llama3's and LongRoPE's ``rope_freqs`` / ``rope_factors_*`` tensors): a
   random tiny model has no tokenizer for its vocabulary step. The GGUF is written and read
   back with ``gguf.GGUFReader``.
2. **the rope mode**: ``llama_model_rope_type`` parsed from the vendored src/llama-model.cpp,
   the GGUF's ``general.architecture`` mapped through src/llama-arch.cpp's name table
   (:mod:`.llama_cpp_source`).
3. **the op**: ggml's own ``ggml_rope_ext`` / ``ggml_rope_multi`` (ggml-python 0.0.45, through
   posenc's ggml peer) with the arguments llama.cpp derives from the metadata
   (:func:`.llama_cpp_source.ggml_parameters`, a minimal transcription of
   ``llama_model::load_hparams``, cited there), applied to q and k at a prefill of 8
   positions and decode tokens at 100, the original context - 1, + 0, + 1 and twice it.

Not covered: a model graph that passes another mode or its own per-layer schedule
(NoPE layers, per-layer bases other than rope.freq_base_swa): a layer posenc reads as NoPE is
not applied. Each rotation is graded as every engine sweep grades (:func:`.engine_judge.judge`).
"""

from __future__ import annotations

import hashlib
import importlib
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from . import engine_judge
from . import llama_cpp_source as source
from .engine_report import EngineRow, run_forked, sweep_each
from .transformers_reading import LAYOUTS, expected_layers

ENGINE = "llama.cpp"
VENDOR = Path("/work/envs/src/llama_cpp_python-0.3.36/vendor/llama.cpp")
PREFILL = 8
# divergences settled in float64: (family, diagnosis substring) -> adjudication
# (tests/peers/test_engine_sweeps.py holds each with an independent float64 computation)
ADJUDICATED = {
    ("gpt_oss", "truncate: false is not read"): (
        "llama.cpp bug: ggml_rope_yarn_corr_dims always floors and ceils YaRN's correction "
        "range and the GGUF has no key for gpt-oss's truncate: false, which transformers and "
        "OpenAI's reference honour (known-issues.md#llamacpp-ggml-yarn-ignores-truncate-false-"
        "gpt-oss)"),
    ("nemotron", "no reading posenc knows matches"): (
        "llama.cpp converter bug: rope.dimension_count = int(factor * hidden) // heads, not "
        "factor * head_dim (8 where transformers rotates 16 features here) (known-issues.md#"
        "llamacpp-converter-nemotrons-rope-width-ignores-head_dim)"),
    ("solar_open", "no reading posenc knows matches"): (
        "llama.cpp converter bug: SolarOpen inherits Glm4MoeModel's partial_rotary_factor "
        "default 0.5 where transformers' SolarOpen defaults to 1.0 (8 of 16 features rotated) "
        "(known-issues.md#llamacpp-converter-solar-open-rotates-half-the-head)"),
    **{(glm, "no reading posenc knows matches"): (
        "llama.cpp converter bug: Glm4Model defaults partial_rotary_factor to 0.5 where "
        f"transformers' {name} defaults to 1.0 (8 of 16 features rotated); its M-RoPE row "
        "reorder is exact (known-issues.md#llamacpp-converter-glm-41v-and-glm-ocr-rotate-half-"
        "the-head-without-partial_rotary_factor)") for glm, name in (("glm4v", "Glm4v"),
                                                                    ("glm_ocr", "GlmOcr"))},
    ("pocket_tts", "pairs as 'interleaved' where transformers pairs as 'half'"): (
        "documented convention: llama.cpp converts Kyutai's original in_proj (rows unpermuted) "
        "and pairs (2i, 2i + 1) as Kyutai's reference does; transformers pairs halves of rows "
        "its PermuteForRope reorders: equal attention logits in float64 (the sweep pairs "
        "transformers' rows, which llama.cpp never reads)"),
    ("hy_v4", "pairs as 'interleaved' where transformers pairs as 'half'"): (
        "unsettled: llama.cpp pairs (2i, 2i + 1) and transformers halves of the same "
        "unpermuted rows (logits 0.92 apart); Tencent's reference decides (known-issues.md#"
        "open-hy_v4-pairs-its-rope-rows-one-way-in-llamacpp-another-in-transformers)"),
}


def vendor() -> Path:
    """The llama.cpp tree (converter, gguf-py, src) the sweep reads: POSENC_LLAMA_CPP or the
    vendored copy of llama-cpp-python 0.3.36's sdist."""
    import os

    return Path(os.environ.get("POSENC_LLAMA_CPP", VENDOR))


def _converter_class(family: Any) -> tuple[str, Any] | None:
    """(HF architecture, the converter's model class) for the family's model classes."""
    if str(vendor()) not in sys.path:
        sys.path.insert(0, str(vendor()))
    conversion = importlib.import_module("conversion")
    try:
        modeling = importlib.import_module(f"transformers.models.{family.name}.modeling_"
                                           f"{family.name}")
    except ImportError:
        return None
    names = [n for n in dir(modeling) if n in conversion.TEXT_MODEL_MAP]
    names.sort(key=lambda n: (not n.endswith("ForCausalLM"), n))
    return (names[0], conversion.get_model_class(names[0])) if names else None


def _metadata(arch: str, model_cls: Any, config: dict[str, Any], folder: Path
              ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The converter's metadata step written as a GGUF and read back: (key -> value, rope
    tensors)."""
    import json

    import gguf

    from .mlx_lm_observer import hub_config

    (folder / "config.json").write_text(json.dumps({**hub_config(config), "architectures": [arch]}))
    model = model_cls(folder, gguf.LlamaFileType.ALL_F32, folder / "tiny.gguf", eager=True)
    model.set_gguf_parameters()
    inner = getattr(model, "impl", model)  # Mistral3Model converts through its impl's writer
    for name, tensor in inner.generate_extra_tensors():
        inner.gguf_writer.add_tensor(name, np.asarray(tensor, dtype=np.float32))
    meta_perm = _q_rows(model)
    meta, reader = written_and_read(inner.gguf_writer, folder / "tiny.gguf")
    tensors = {t.name: np.array(t.data, dtype=np.float64) for t in reader.tensors
               if "rope" in t.name}
    if meta_perm is not None:
        meta["posenc.q_rows"] = meta_perm
    return meta, tensors


def written_and_read(writer: Any, path: Path) -> tuple[dict[str, Any], Any]:
    """``writer`` (a converter's ``gguf_writer``) written to ``path`` and read back: (key ->
    value of every field gguf can decode, the ``GGUFReader``)."""
    import gguf

    writer.write_header_to_file(path=path)
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    reader = gguf.GGUFReader(path)
    meta = {}
    for key, field in reader.fields.items():
        try:
            meta[key] = field.contents()
        except Exception:  # a field gguf cannot decode is not one the sweep reads
            continue
    return meta, reader


def _q_rows(model: Any) -> list[int] | None:
    """The order the converter writes a head's q rows in (row r of the GGUF's head 0 is row
    ``rows[r]`` of transformers' q_proj), read by running its ``modify_tensors`` on a q_proj
    weight whose rows hold their own index; None where it writes no attn_q of that size."""
    import torch

    heads = int(model.find_hparam(["num_attention_heads", "n_head", "n_heads"]))
    head = int(model.hparams.get("head_dim") or model.hparams["hidden_size"] // heads)
    data = torch.arange(heads * head, dtype=torch.float32)[:, None].repeat(1, 2)
    try:
        out = list(model.modify_tensors(data, "model.layers.0.self_attn.q_proj.weight", 0))
    except Exception:  # a converter without a separate q_proj (fused qkv)
        return None
    for name, tensor in out:
        if "attn_q" in name and tuple(tensor.shape) == tuple(data.shape):
            rows = [round(float(v)) for v in tensor[:head, 0]]
            return rows if sorted(rows) == list(range(head)) else None
    return None


def _factors(tensors: dict[str, np.ndarray], context: int, n_ctx_orig: int
             ) -> np.ndarray | None:
    """llama_model::get_rope_factors: rope_freqs, else long past the original context."""
    for name in tensors:
        if name.startswith("rope_freqs"):
            return tensors[name]
    kind = "long" if context > n_ctx_orig else "short"
    return next((t for n, t in tensors.items() if f"rope_factors_{kind}" in n), None)


def _apply(mode: str | None, params: dict[str, Any], tensors: dict[str, np.ndarray], width: int,
           offsets: list[int], rows: list[int] | None = None) -> list[dict[str, Any]]:
    """ggml's rope of random q/k heads, in transformers' feature order: where the converter
    reorders a head's rows (``rows``), the GGUF's q is x[..., rows], and its result is put
    back in transformers' order (the attention scores are those of that order)."""
    from posenc.backends.peers.ggml import ggml_rope

    order = np.asarray(rows if rows is not None and len(rows) == width else range(width),
                       dtype=np.int64)

    rng = np.random.default_rng(0)
    out = []
    for phase, length, offset in [("prefill", PREFILL, 0), *(("decode", 1, o) for o in offsets)]:
        x = rng.standard_normal((1, 2, length, width)).astype(np.float32)
        pos = np.arange(offset, offset + length)
        if mode is None:
            y = x
        else:
            multi = mode in ("mrope", "imrope", "vision")
            rows = np.stack([pos] * 4) if multi else pos  # a text token: every axis at p
            y = ggml_rope(np.ascontiguousarray(x[..., order]), rows, n_dims=params["n_dims"], mode=mode,
                          freq_base=params["freq_base"], freq_scale=params["freq_scale"],
                          ext_factor=params["ext_factor"], attn_factor=params["attn_factor"],
                          beta_fast=params["beta_fast"], beta_slow=params["beta_slow"],
                          n_ctx_orig=params["n_ctx_orig"],
                          sections=params["sections"] if multi else None,
                          freq_factors=_factors(tensors, offset + length, params["n_ctx_orig"])
                          )[..., np.argsort(order)]
        out.append({"phase": f"{phase} at {offset}", "x": x.astype(np.float64),
                    "y": np.asarray(y, dtype=np.float64), "offset": np.array([offset]),
                    "dims": params["n_dims"]})
    return out


# -- in the child process ----------------------------------------------------------------------
def observe(family: Any) -> dict[str, Any]:
    """What llama.cpp would rotate for the family (run in a forked process), in the form
    :func:`.mlx_lm.judge` reads."""
    import logging

    from posenc.conformance.sweeps.transformers_families import table_positions

    from .mlx_lm import _Attributes
    from .mlx_lm_observer import tiny

    logging.disable(logging.WARNING)  # the converter's and gguf's notes on a tiny config
    _, config, why = tiny(family)
    if config is None:
        return {"model_type": "", "unsupported": "", "problem": why}
    obs: dict[str, Any] = {"model_type": config.get("model_type", ""), "config": config,
                           "calls": [], "applied": []}
    found = _converter_class(family)
    if found is None:
        return {**obs, "unsupported": "no converter class", "problem": (
            "llama.cpp: convert_hf_to_gguf.py registers none of the family's architectures")}
    arch, model_cls = found
    obs["architecture"] = f"{model_cls.__module__}.{model_cls.__name__} ({arch})"
    with tempfile.TemporaryDirectory() as folder:
        try:
            meta, tensors = _metadata(arch, model_cls, config, Path(folder))
        except Exception as exc:
            from posenc.conformance.sweeps.transformers_observation import last_frame

            return {**obs, "unsupported": "", "problem": f"llama.cpp's converter: "
                    f"{last_frame(exc)}"}
    src = vendor() / "src"
    types = source.rope_types((src / "llama-model.cpp").read_text(encoding="utf-8"))
    names = source.arch_names((src / "llama-arch.cpp").read_text(encoding="utf-8"))
    gguf_arch = meta["general.architecture"]
    n = int(meta.get(f"{gguf_arch}.block_count") or config.get("num_hidden_layers") or 1)
    obs["layers"] = n
    if f"{gguf_arch}.rope.scaling.yarn_log_multiplier" in meta:
        # llama.cpp turns it into the rope's attn_factor in llama-context/llama-graph code that
        # the vendored tree lacks: not transcribed here
        return {**obs, "unsupported": "", "problem": "llama.cpp's converter writes "
                "rope.scaling.yarn_log_multiplier, whose attn_factor derivation (not in the "
                "vendored sources) this sweep does not transcribe"}
    layers, _ = expected_layers(config, n)
    offsets = sorted({p for p in table_positions(_Attributes(config)) if p >= 100})
    heads = int(meta.get(f"{gguf_arch}.attention.head_count") or 1)
    head = int(meta.get(f"{gguf_arch}.attention.key_length")
               or int(meta.get(f"{gguf_arch}.embedding_length") or 0) // max(heads, 1)
               or config.get("head_dim") or 0)
    if not head:
        return {**obs, "unsupported": "", "problem": f"llama.cpp's converter wrote no head size "
                f"for {gguf_arch} (attention.key_length, embedding_length)"}
    runs: dict[bool, list[dict[str, Any]]] = {}
    for i, layer in enumerate(layers):
        if not layer.attention or layer.scaling is None:
            continue
        swa = layer.layer_type == "sliding_attention"
        if swa not in runs:
            params = source.ggml_parameters(meta, head, swa=swa)
            mode = source.rope_mode(gguf_arch, types, names, params["sections"])
            obs.setdefault("modes", {})[gguf_arch] = mode
            runs[swa] = _apply(mode, params, tensors, head, offsets, meta.get("posenc.q_rows"))
        obs["applied"] += [dict(c, layer=i) for c in runs[swa]]
    rows = meta.get("posenc.q_rows")
    reordered = rows is not None and rows != sorted(rows)
    obs["forward"] = (f"ggml mode {obs.get('modes', {}).get(gguf_arch)} ({gguf_arch})"
                      + ("; the converter reorders q/k rows" if reordered else ""))
    return obs


def _without(obs: dict[str, Any], unrotated: set[int]) -> dict[str, Any]:
    """The observation without the layers transformers' module leaves unrotated where posenc's
    reader has no rule (a spec gap row): llama.cpp's graph keeps its own per-layer NoPE
    schedule, which this sweep does not read, so those layers are not checked."""
    dropped = sorted({c["layer"] for c in obs.get("applied", []) if c["layer"] in unrotated})
    if not dropped:
        return obs
    note = (f"{obs['forward']}; layers {', '.join(map(str, dropped))} not checked (transformers "
            "leaves them unrotated; llama.cpp's per-layer NoPE schedule is not read)")
    return {**obs, "forward": note,
            "applied": [c for c in obs["applied"] if c["layer"] not in unrotated]}


# -- the sweep -----------------------------------------------------------------------------------
def versions() -> dict[str, str]:
    from importlib.metadata import version

    digest = hashlib.sha256()
    for rel in ("convert_hf_to_gguf.py", "src/llama-model.cpp", "src/llama-arch.cpp"):
        digest.update((vendor() / rel).read_bytes())
    return {"llama.cpp": f"llama-cpp-python 0.3.36 vendor tree, sha256 {digest.hexdigest()[:16]}",
            "ggml-python": version("ggml-python"), "gguf": version("gguf"),
            "transformers": version("transformers"), "python": sys.version.split()[0]}


def sweep_files() -> list[Path]:
    here = Path(__file__).parent
    return [here / "llama_cpp.py", here / "llama_cpp_source.py", here / "mlx_lm.py",
            here / "mlx_lm_observer.py", here / "engine_judge.py", here / "engine_report.py",
            here / "transformers_reading.py"]


def sweep(families: list[Any], truth: dict[str, dict[str, Any]],
          progress: Any = None) -> list[EngineRow]:
    """The verdicts on ``families``, each observed in a forked process."""
    import ggml  # noqa: F401  (imported once, before the forks)
    import transformers  # noqa: F401

    if str(vendor()) not in sys.path:
        sys.path.insert(0, str(vendor()))
    importlib.import_module("conversion").load_all_models()

    return sweep_each(families, truth, progress, _verdict)


def _verdict(family: Any, known: dict[str, Any]) -> EngineRow:
    obs = _without(run_forked(observe, family), set(known.get("unrotated", ())))
    row = engine_judge.judge(ENGINE, {}, family.name, obs, known.get("pairings") or LAYOUTS,
                             frozenset(known.get("unrotated", ())))
    note = obs.get("forward", "")
    row.reason = row.reason.replace(f"forward not run: {note}", note)
    engine_judge.adjudicate(row, ADJUDICATED)
    return row
