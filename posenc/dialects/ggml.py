"""transformers rope -> llama.cpp / ggml rope parameters (``ggml_rope_ext`` /
``ggml_rope_multi``, see :func:`posenc.ggml_rope`), and back where the mapping is invertible.

The correspondences (llama.cpp convert_hf_to_gguf.py and src/llama-model.cpp read for them):
linear ``factor`` -> ``freq_scale = 1/factor``; static NTK -> ``freq_base``; YaRN ->
``freq_scale = 1/factor``, ``ext_factor = 1``, ``n_ctx_orig``, betas, and ``attn_factor`` =
transformers' attention factor divided by ggml's internal ``1 + 0.1 ln(1/freq_scale)``;
Llama 3.1 and LongRoPE -> the ``rope_freqs`` tensor of per-pair divisors of theta_i.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .. import params as checks
from ..errors import ParameterError
from .transformers import RopeLayer, require_layer, require_qwen_mrope

MODES = ("normal", "neox", "mrope", "imrope", "vision")
UNROTATED_DIVISOR = 1e30  # rope_freqs entry of a pair that proportional rope leaves unrotated


def _ggml_yarn_mscale(freq_scale: float) -> float:
    return 1.0 + 0.1 * math.log(1.0 / freq_scale)


def _mode(layer: RopeLayer, mode: str | None) -> str:
    """The ggml mode: ``mode`` checked against the layer's M-RoPE sections, or its default."""
    scaling = layer.scaling
    require_qwen_mrope(layer, "ggml's 'mrope' and 'imrope' modes run")
    sections = layer.mrope_section
    default_mode = ("imrope" if scaling.get("mrope_interleaved") else "mrope") if sections \
        else ("normal" if layer.interleaved else "neox")
    mode = default_mode if mode is None else mode
    if mode not in MODES:
        raise ParameterError(f"mode={mode!r} is not one of {', '.join(map(repr, MODES))}")
    if sections and mode in ("normal", "neox"):
        raise ParameterError(
            f"mrope_section={sections!r}: ggml mode {mode!r} has one position per token and "
            "cannot hold M-RoPE sections (use mode 'mrope' or 'imrope')")
    if mode == "vision":
        raise ParameterError("mode='vision' restarts the frequency ladder per section, which "
                             "no transformers text rope config describes")
    if not sections and mode in ("mrope", "imrope"):
        raise ParameterError(f"mode={mode!r} needs mrope_section in the config")
    return mode


def to_ggml(layer: RopeLayer, *, mode: str | None = None, n_ctx: int | None = None
            ) -> dict[str, Any]:
    """ggml rope parameters equal to ``layer``'s rope (keys as :func:`posenc.ggml_rope` takes
    them). ``mode``: by default ``neox`` for transformers' half layout on unpermuted weights,
    ``normal`` for an interleaved checkpoint (DeepSeek), ``mrope``/``imrope`` with
    ``mrope_section``; ``normal`` on a half-layout model needs the q/k weights permuted with
    ``permute_qk(to='interleaved')``. ``n_ctx``: the context llama.cpp allocates, which picks
    LongRoPE's factors (long when ``n_ctx > original_max_position_embeddings``)."""
    require_layer(layer)
    if n_ctx is not None:
        n_ctx = checks.count("n_ctx", n_ctx)
    scaling, name = layer.scaling, layer.rope_type
    mode = _mode(layer, mode)
    sections = layer.mrope_section
    resolved = layer.resolve()
    r = resolved.rotary_dim
    base = float(scaling["rope_theta"])
    out: dict[str, Any] = {
        "n_dims": r, "mode": mode, "freq_base": base, "freq_scale": 1.0, "ext_factor": 0.0,
        "attn_factor": 1.0, "beta_fast": 32.0, "beta_slow": 1.0, "n_ctx_orig": 0,
        "sections": None, "freq_factors": None}
    if sections:
        if len(sections) != 3 or 2 * sum(sections) != r:
            raise ParameterError(f"mrope_section={sections!r} must be 3 ints summing to "
                                 f"rotary_dim / 2 = {r // 2}")
        out["sections"] = [int(s) for s in sections] + [0]
    original = scaling.get("original_max_position_embeddings")
    if name == "default":
        pass
    elif name == "linear":
        out["freq_scale"] = 1.0 / float(scaling["factor"])
    elif name == "ntk":
        out["freq_base"] = base * float(scaling["factor"]) ** (r / (r - 2))
    elif name == "ntk_alpha":  # Hunyuan: a fixed base, as llama.cpp's converter bakes it
        out["freq_base"] = base * float(scaling["alpha"]) ** (r / (r - 2))
    elif name == "dynamic":
        raise ParameterError(
            "rope_type='dynamic' rescales the base by the current sequence length; ggml's rope "
            "parameters are fixed per model (convert with a static rope_type such as 'ntk')")
    elif name == "yarn":
        if scaling.get("truncate", True) is False:
            raise ParameterError(
                "truncate=False (gpt-oss): ggml_rope_yarn_corr_dims always floors and ceils "
                "the correction dims, so ggml cannot express an untruncated YaRN ramp")
        freq_scale = 1.0 / resolved_factor(layer)
        out.update(freq_scale=freq_scale, ext_factor=1.0,
                   attn_factor=resolved.attention_factor / _ggml_yarn_mscale(freq_scale),
                   beta_fast=float(scaling.get("beta_fast") or 32.0),
                   beta_slow=float(scaling.get("beta_slow") or 1.0),
                   n_ctx_orig=int(original))
    elif name in ("llama3", "longrope"):
        plain = layer_default(layer)
        inv = resolved.inv_freq
        if name == "longrope":
            long = n_ctx is not None and n_ctx > int(original)
            inv = resolved.long_inv_freq if long else resolved.inv_freq
            out["attn_factor"] = resolved.attention_factor
            out["n_ctx_orig"] = int(original)
        out["freq_factors"] = [p / q for p, q in zip(plain, inv, strict=True)]
    elif name == "proportional":
        # llama.cpp (src/models/gemma4.cpp) rotates the whole head of a full-attention layer
        # and gives it a rope_freqs tensor: the unrotated pairs get a divisor so large that
        # their angle is 0 in float32 at any position
        out["freq_factors"] = [p / q if q else UNROTATED_DIVISOR
                               for p, q in zip(layer_default(layer), resolved.inv_freq,
                                               strict=True)]
    return out


def resolved_factor(layer: RopeLayer) -> float:
    factor = layer.scaling.get("factor")
    if factor is None:
        return layer.scaling["max_position_embeddings"] / \
            layer.scaling["original_max_position_embeddings"]
    return float(factor)


def layer_default(layer: RopeLayer) -> tuple[float, ...]:
    r = layer.resolve().rotary_dim
    base = float(layer.scaling["rope_theta"])
    return tuple(base ** (-2.0 * i / r) for i in range(r // 2))


def from_ggml(params: dict[str, Any], *, head_dim: int | None = None) -> dict[str, Any]:
    """A transformers ``rope_parameters`` dict for ggml rope parameters, where one exists:
    default, linear and YaRN (and M-RoPE sections). A ``rope_freqs`` tensor is not invertible:
    it does not say whether Llama 3.1 or LongRoPE made it."""
    _check_ggml(params)
    if head_dim is not None:
        head_dim = checks.count("head_dim", head_dim)
    if params.get("freq_factors") is not None:
        raise ParameterError("freq_factors (rope_freqs) is not invertible: the tensor does not "
                             "say which schedule (llama3, longrope) produced it")
    if params.get("mode") == "vision":
        raise ParameterError("mode='vision' has no transformers text rope equivalent")
    out: dict[str, Any] = {"rope_type": "default", "rope_theta": float(params["freq_base"])}
    n_dims = params.get("n_dims")
    if head_dim is not None and n_dims is not None and n_dims != head_dim:
        out["partial_rotary_factor"] = n_dims / head_dim
    freq_scale = float(params.get("freq_scale", 1.0))
    ext = float(params.get("ext_factor", 0.0))
    if ext not in (0.0, 1.0):
        raise ParameterError(f"ext_factor={ext!r}: transformers' YaRN blends fully (1) or not "
                             "at all (0)")
    if ext == 1.0:
        if "n_ctx_orig" not in params:
            raise ParameterError("ext_factor=1.0 (YaRN) needs n_ctx_orig, the original context")
        checks.count("n_ctx_orig", params["n_ctx_orig"])
        factor = 1.0 / freq_scale
        out.update(rope_type="yarn", factor=factor,
                   original_max_position_embeddings=int(params["n_ctx_orig"]),
                   beta_fast=float(params.get("beta_fast", 32.0)),
                   beta_slow=float(params.get("beta_slow", 1.0)),
                   attention_factor=float(params.get("attn_factor", 1.0))
                   * _ggml_yarn_mscale(freq_scale))
    elif freq_scale != 1.0:
        out.update(rope_type="linear", factor=1.0 / freq_scale)
    elif float(params.get("attn_factor", 1.0)) != 1.0:
        raise ParameterError("attn_factor != 1 without YaRN has no transformers equivalent")
    if params.get("mode") in ("mrope", "imrope"):
        sections = params["sections"]
        if sections[3]:
            raise ParameterError(f"sections={sections!r}: transformers' M-RoPE has 3 sections")
        out["mrope_section"] = list(sections[:3])
        if params["mode"] == "imrope":
            out["mrope_interleaved"] = True
    return out


GGML_KEYS = ("n_dims", "mode", "freq_base", "freq_scale", "ext_factor", "attn_factor",
             "beta_fast", "beta_slow", "n_ctx_orig", "sections", "freq_factors", "head_dim")


def _check_ggml(params: Any) -> None:
    """ggml rope parameters as :func:`posenc.ggml_rope` takes them (and a ``head_dim``): a
    dict of known keys, each of its kind."""
    if not isinstance(params, Mapping):
        raise ParameterError(f"params must be a dict of ggml rope parameters, got "
                             f"{type(params).__name__}")
    unknown = sorted(str(k) for k in params if k not in GGML_KEYS)
    if unknown:
        raise ParameterError(f"params has key {unknown[0]!r}, not a ggml rope parameter (one "
                             f"of {', '.join(GGML_KEYS)})")
    if "freq_base" not in params:
        raise ParameterError(f"ggml parameters lack 'freq_base' (got keys {sorted(params)})")
    for key in ("freq_base", "freq_scale"):
        if key in params:
            checks.positive(key, params[key])
    for key in ("ext_factor", "attn_factor", "beta_fast", "beta_slow"):
        if key in params:
            checks.number(key, params[key])
    for key, minimum in (("n_dims", 2), ("n_ctx_orig", 0), ("head_dim", 1)):
        if params.get(key) is not None:
            checks.count(key, params[key], minimum=minimum,
                         must_be=f"an int >= {minimum}")
    if "mode" in params:
        checks.choice("mode", params["mode"], MODES)
    sections = params.get("sections")
    if sections is not None and (not isinstance(sections, list | tuple) or len(sections) != 4
                                 or any(isinstance(v, bool) or not isinstance(v, int)
                                        or v < 0 for v in sections)):
        raise ParameterError(f"sections={sections!r} must be 4 ints >= 0 (t, h, w, e pairs)")
    if params.get("mode") in ("mrope", "imrope") and sections is None:
        raise ParameterError(f"mode={params['mode']!r} needs sections")


def freq_factors_summary(factors: list[float] | None) -> str:
    """One line about a rope_freqs tensor: its length and range, and where it leaves 1."""
    if factors is None:
        return "rope_freqs: none"
    if not isinstance(factors, list | tuple) or not factors:
        raise ParameterError(f"factors must be a non-empty list of numbers, got {factors!r}")
    factors = [checks.positive(f"factors[{i}]", f) for i, f in enumerate(factors)]
    changed = [i for i, f in enumerate(factors) if abs(f - 1.0) > 1e-12]
    span = f"pairs {changed[0]}..{changed[-1]} differ from 1" if changed else "all 1"
    return (f"rope_freqs: {len(factors)} float32 divisors of theta_i, min {min(factors):.6g}, "
            f"max {max(factors):.6g}, first {factors[0]:.6g}, last {factors[-1]:.6g}; {span}")
