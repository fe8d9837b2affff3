"""Honest float32 rope implementations, written here in NumPy after the engines' arithmetic:
frequencies by ``pow``, ``exp(log)`` (one 3.5 eps off, as MLX's exp was measured), ggml's
float32 ladder, Llama 3's smoothing and YaRN's ramp in float32, then float32 angles ``m·θ``
and a float32 rotation. ``long_bug`` plants the bugs engines make at long positions on top of
the same arithmetic: a cos/sin cache clamped or zero past N rows, positions wrapped to int16 or
modulo a length, a dynamic scale computed for the call's length."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import posenc

from ..per_encoding.test_float32_frequency_models import (
    exp_frequencies,
    ladder_frequencies,
    llama3_frequencies,
    pow_frequencies,
    yarn_frequencies,
)

F = np.float32
PLAIN = {"pow": pow_frequencies, "exp(log)": exp_frequencies, "ladder": ladder_frequencies,
         "exp 3.5 eps off": lambda d, b: exp_frequencies(d, b, 3.5)}


def _kind(scaling: Any) -> str:
    return (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))


def _frequencies(model: str, dim: int, base: float, scaling: Any, seq: int,
                 seq_len: Any) -> tuple[np.ndarray, float]:
    kind = _kind(scaling)
    base = float((scaling or {}).get("rope_theta") or base)
    if kind == "default":
        return PLAIN[model](dim, base), 1.0
    if kind == "linear":
        return (PLAIN[model](dim, base) / F(scaling["factor"])).astype(F), 1.0
    if kind == "dynamic":  # transformers: base * (s·L/L0 - (s - 1))^(d/(d-2)), float32 base
        trained = scaling.get("max_position_embeddings") or \
            scaling["original_max_position_embeddings"]
        length = max(seq if seq_len is None else seq_len, trained)
        s = scaling["factor"]
        return PLAIN[model](dim, base * (s * length / trained - (s - 1)) ** (dim / (dim - 2))), 1.0
    if kind == "llama3":
        s = scaling
        return llama3_frequencies(dim, base, s["factor"], s["low_freq_factor"],
                                  s["high_freq_factor"], s["original_max_position_embeddings"]), 1.0
    if kind == "yarn" and scaling.get("truncate", True) and not scaling.get("mscale") \
            and scaling.get("attention_factor") is None:
        f = float(scaling["factor"])
        theta = yarn_frequencies(dim, base, f, scaling["original_max_position_embeddings"],
                                 scaling.get("beta_fast") or 32.0,
                                 scaling.get("beta_slow") or 1.0)
        return theta, float(F(0.1) * F(math.log(f)) + F(1)) if f > 1 else 1.0
    raise posenc.Unsupported(f"rope_type={kind!r} is not modelled here")


def _positions(x: np.ndarray, positions: Any) -> np.ndarray:
    seq = x.shape[-2]
    pos = np.arange(seq) if positions is None else np.asarray(positions)
    if pos.ndim == 2:
        pos = pos.reshape(pos.shape[0], *([1] * (x.ndim - 3)), seq)
    return pos


def _rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, layout: str, r: int) -> np.ndarray:
    out = x.astype(F).copy()
    half = r // 2
    a, b = ((np.arange(half), np.arange(half) + half) if layout == "half"
            else (np.arange(half) * 2, np.arange(half) * 2 + 1))
    xa, xb = out[..., a], out[..., b]
    out[..., a] = xa * cos - xb * sin
    out[..., b] = xb * cos + xa * sin
    return out


def float32_rope(model: str = "pow", long_bug: tuple[str, int] | None = None,
                 attention_factor: bool = True) -> Any:
    """A rope with posenc's signature computing in float32 the ways engines do
    (``model``: a key of :data:`PLAIN`), with ``long_bug`` planted when given: ``(kind, N)``,
    kind one of ``clamp``, ``zeros``, ``modulo``, ``int16``, ``call_length``;
    ``attention_factor=False`` leaves YaRN's attention factor out."""

    def rope(x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
             rotary_dim: Any = None, scaling: Any = None, seq_len: Any = None) -> Any:
        x = np.asarray(x)
        if scaling and ("partial_rotary_factor" in scaling or rotary_dim is not None):
            raise posenc.Unsupported("partial rotary with scaling is not modelled here")
        r = rotary_dim or x.shape[-1]
        seq = x.shape[-2]
        bug, rows = long_bug or ("", 0)
        if bug == "call_length":
            seq_len = seq
        elif seq_len is None and positions is not None and _kind(scaling) == "dynamic":
            seq_len = int(np.max(positions)) + 1
        theta, attention = _frequencies(model, r, base, scaling, seq, seq_len)
        attention = attention if attention_factor else 1.0
        pos = _positions(x, positions)
        read = {"clamp": np.minimum(pos, rows - 1), "modulo": np.mod(pos, rows or 1),
                "int16": pos.astype(np.int16)}.get(bug, pos)
        angles = read.astype(F)[..., None] * theta
        cos, sin = np.cos(angles) * F(attention), np.sin(angles) * F(attention)
        if bug == "zeros":
            cos, sin = (np.where((pos >= rows)[..., None], F(0), v) for v in (cos, sin))
        return _rotate(x, cos, sin, layout, r).astype(x.dtype)

    rope.__name__ = f"float32_rope[{model}{'' if long_bug is None else f', {long_bug}'}]"
    return rope


def in_torch(rope: Any) -> Any:
    """``rope`` taking and returning torch tensors (bfloat16 included): the float32 NumPy
    arithmetic above on the tensor's values, the result cast back to its dtype."""
    import torch

    def wrapped(x: Any, positions: Any = None, **params: Any) -> Any:
        values = x.detach().to(torch.float32).numpy()
        pos = None if positions is None else positions.detach().numpy()
        return torch.from_numpy(np.asarray(rope(values, pos, **params), F)).to(x.dtype)

    wrapped.__name__ = rope.__name__
    return wrapped
