"""What llama.cpp's pinned C++ source and a GGUF's rope metadata decide, read without the engine
(``posenc sweep llama.cpp``; tested on excerpts written in the tests).

- :func:`rope_types`: ``llama_model_rope_type`` in ``src/llama-model.cpp``, parsed: each
  ``LLM_ARCH_*`` case to its ``LLAMA_ROPE_TYPE_*``; a case returning
  ``hparams.use_mrope() ? A : B`` keeps both (A where the GGUF carries rope sections).
- :func:`arch_names`: ``LLM_ARCH_NAMES`` in ``src/llama-arch.cpp``, the GGUF
  ``general.architecture`` string of each ``LLM_ARCH_*``.
- :func:`ggml_parameters`: the arguments llama.cpp passes to ``ggml_rope_ext`` for the GGUF's
  metadata. This is a transcription, kept minimal, of ``llama_model::load_hparams``
  (src/llama-model.cpp: ``n_rot`` = rope.dimension_count else the head size, ``freq_base``
  = rope.freq_base else 10000, ``freq_scale`` = 1 / rope.scaling.factor, ``n_ctx_orig`` =
  rope.scaling.original_context_length else the context length, ``attn_factor`` =
  rope.scaling.attn_factor) and of llama_context's default ``yarn_ext_factor`` (1 for YaRN,
  0 otherwise; llama-context.cpp is not in the vendored tree, so this one line is from the
  upstream source, not the pinned one).
"""

from __future__ import annotations

import re
from typing import Any

from posenc.errors import ParameterError

# llama.cpp's rope type -> the mode name posenc's ggml peer (backends/peers/ggml.py) takes
MODES = {"NORM": "normal", "NEOX": "neox", "MROPE": "mrope", "IMROPE": "imrope",
         "VISION": "vision", "NONE": None}
_CASE = re.compile(r"case\s+(LLM_ARCH_\w+)\s*:")
_TYPE = re.compile(r"LLAMA_ROPE_TYPE_(\w+)")
_NAME = re.compile(r"\{\s*(LLM_ARCH_\w+)\s*,\s*\"([^\"]+)\"\s*\}")


def _function_body(source: str, name: str) -> str:
    start = source.find(f"{name}(")
    if start < 0:
        raise ParameterError(f"source: no function {name!r} in the C++ given")
    brace = source.index("{", start)
    depth = 0
    for i in range(brace, len(source)):
        depth += {"{": 1, "}": -1}.get(source[i], 0)
        if depth == 0:
            return source[brace + 1:i]
    raise ParameterError(f"source: {name!r} has unbalanced braces")


def rope_types(source: str) -> dict[str, tuple[str, str]]:
    """``LLM_ARCH_X -> (type with rope sections, type without)`` from llama-model.cpp's
    ``llama_model_rope_type``. A case group's text up to the next ``case`` names its type; where
    it names several without ``use_mrope()`` (DFlash's draft rules) the last, the fallthrough,
    is kept."""
    body = _function_body(source, "llama_rope_type llama_model_rope_type")
    out: dict[str, tuple[str, str]] = {}
    pending: list[str] = []
    cases = list(_CASE.finditer(body))
    for i, match in enumerate(cases):
        pending.append(match.group(1))
        end = cases[i + 1].start() if i + 1 < len(cases) else len(body)
        text = body[match.end():end]
        if "GGML_ABORT" in text:  # LLM_ARCH_UNKNOWN: no rope type
            pending = []
            continue
        kinds = _TYPE.findall(text)
        if not kinds:
            continue
        conditional = re.search(r"use_mrope\(\)\s*\?\s*LLAMA_ROPE_TYPE_(\w+)\s*:\s*"
                                r"LLAMA_ROPE_TYPE_(\w+)", text)
        pair = (conditional.group(1), conditional.group(2)) if conditional else \
            (kinds[-1], kinds[-1])
        for arch in pending:
            out[arch] = pair
        pending = []
    return out


def arch_names(source: str) -> dict[str, str]:
    """``general.architecture`` string -> ``LLM_ARCH_X`` from llama-arch.cpp's name table."""
    start = source.find("LLM_ARCH_NAMES")
    if start < 0:
        raise ParameterError("source: no LLM_ARCH_NAMES table in the C++ given")
    table = source[start:source.index("};", start)]
    return {name: arch for arch, name in _NAME.findall(table)}


def rope_mode(arch: str, types: dict[str, tuple[str, str]], names: dict[str, str],
              sections: list[int] | None) -> str | None:
    """The ggml mode llama.cpp rotates ``general.architecture == arch`` with (None: no rope)."""
    if arch not in names:
        raise ParameterError(f"general.architecture={arch!r}: not in llama-arch.cpp's table")
    if names[arch] not in types:
        raise ParameterError(f"{names[arch]}: not a case of llama_model_rope_type")
    with_sections, plain = types[names[arch]]
    return MODES[with_sections if sections and any(sections) else plain]


def _get(meta: dict[str, Any], arch: str, key: str, default: Any = None) -> Any:
    return meta.get(f"{arch}.{key}", default)


def ggml_parameters(meta: dict[str, Any], head_dim: int, *, swa: bool = False) -> dict[str, Any]:
    """The ``ggml_rope_ext`` arguments for a GGUF's metadata ``meta`` (key -> value as
    GGUFReader gives it) and a layer of ``head_dim``: n_dims, freq_base, freq_scale,
    ext_factor, attn_factor, beta_fast, beta_slow, n_ctx_orig, sections."""
    arch = meta.get("general.architecture")
    if not arch:
        raise ParameterError("meta: no general.architecture")
    kind = _get(meta, arch, "rope.scaling.type", "linear")
    factor = float(_get(meta, arch, "rope.scaling.factor", 0.0) or 0.0)
    base = float(_get(meta, arch, "rope.freq_base", 10000.0))
    if swa:
        base = float(_get(meta, arch, "rope.freq_base_swa", base))
    n_ctx = int(_get(meta, arch, "context_length", 0) or 0)
    sections = _get(meta, arch, "rope.dimension_sections")
    key = "rope.dimension_count_swa" if swa and f"{arch}.rope.dimension_count_swa" in meta \
        else "rope.dimension_count"
    return {
        "n_dims": int(_get(meta, arch, key, head_dim)),
        "freq_base": base,
        "freq_scale": 1.0 if factor == 0.0 else 1.0 / factor,
        "ext_factor": float(_get(meta, arch, "rope.scaling.yarn_ext_factor",
                                 1.0 if kind == "yarn" else 0.0)),
        "attn_factor": float(_get(meta, arch, "rope.scaling.attn_factor", 1.0)),
        "beta_fast": float(_get(meta, arch, "rope.scaling.yarn_beta_fast", 32.0)),
        "beta_slow": float(_get(meta, arch, "rope.scaling.yarn_beta_slow", 1.0)),
        "n_ctx_orig": int(_get(meta, arch, "rope.scaling.original_context_length", n_ctx)),
        "sections": [int(s) for s in sections] if sections is not None else None,
        "scaling_type": kind,
    }
