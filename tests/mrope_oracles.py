"""transformers' multimodal rotary embeddings driven in float64, shared by the mrope tests: the
position-id row each model's own code assigns to a feature, and the rotation it applies."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from posenc.rotary.schedules import frequencies, rotary_width

_MODEL_TYPES = {"ernie4_5_vl": "ernie", "bailing": "bailing", "ming": "bailing",
                "hunyuan_vl": "xdrope"}


def ordering_of(p: dict[str, Any]) -> tuple[str, list[int]]:
    """(ordering, sections) of resolved spec parameters, read as the spec's conventions say."""
    cfg = p["scaling"] or {}
    sections = list(p["sections"] or cfg.get("mrope_section") or cfg["xdrope_section"])
    if p["ordering"] is not None:
        return p["ordering"], sections
    if p["interleaved"] or cfg.get("mrope_interleaved"):
        return "interleaved", sections
    if "xdrope_section" in cfg:
        return "xdrope", sections
    for prefix, name in _MODEL_TYPES.items():
        if str(cfg.get("model_type", "")).startswith(prefix):
            return name, sections
    return "contiguous", sections


def config(r: int, base: float, sections: list[int]) -> SimpleNamespace:
    return SimpleNamespace(max_position_embeddings=4096, head_dim=r, hidden_size=r,
                           num_attention_heads=1,
                           rope_parameters={"rope_type": "default", "rope_theta": base,
                                            "mrope_section": list(sections)})


def float64_freqs(positions: np.ndarray, inv_freq: Any):
    """positions [axes, batch, seq] x inv_freq [n] -> torch float64 [axes, batch, seq, n]."""
    import torch

    return torch.tensor(positions)[..., None].double() * torch.tensor(
        np.asarray(inv_freq, np.float64))


def rotate(x: np.ndarray, r: int, cos: Any, sin: Any, rotate_fn: Any, batched: bool,
           layout: str = "half") -> np.ndarray:
    """x * cos + rotate_fn(x) * sin on x's first r features (cos/sin [batch, seq, r]); the
    interleaved layout through a channel permutation when rotate_fn is rotate_half."""
    import torch

    head, perm = x[..., :r], None
    if layout == "interleaved" and rotate_fn is not None and rotate_fn.__name__ == "rotate_half":
        perm = np.concatenate([np.arange(0, r, 2), np.arange(1, r, 2)])
        head = head[..., perm]
    h = torch.tensor(head)
    cos, sin = (cos[:, None], sin[:, None]) if batched else (cos[0], sin[0])
    out = (h * cos + rotate_fn(h) * sin).numpy()
    if perm is not None:
        out = out[..., np.argsort(perm)]
    return np.concatenate([out, x[..., r:]], axis=-1)


def schedule(x: np.ndarray, positions: np.ndarray, p: dict[str, Any]) -> tuple[int, Any, float]:
    r = rotary_width(x.shape[-1], p["scaling"])
    inv_freq, attention = frequencies(r, p["base"], p["scaling"], int(positions.max()) + 1)
    return r, inv_freq, attention
