"""The records of ``posenc sweep transformers``'s observer (:mod:`.transformers_families`):
a family, what was observed of it, and the helpers every observation uses."""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Family:
    """A model family of the installed transformers: its folder under ``transformers.models``,
    the rotary classes it defines (by module) and the bias kinds its modeling code holds."""

    name: str
    rotary: tuple[tuple[str, str], ...] = ()  # (module, class)
    biases: tuple[tuple[str, str], ...] = ()  # (module, "alibi" | "t5")
    # a modeling module with an MLA rope slice (qk_rope_head_dim) and no text rotary class:
    # its text model is run to see whether anything rotates (Kimi Linear, GLM-5 Next)
    rope_slice: str = ""


@dataclass
class Observation:
    family: str
    config: dict[str, Any] = field(default_factory=dict)  # the tiny config's to_dict()
    config_class: str = ""
    rotary_class: str = ""
    tables: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    layers: int = 0
    wiring: str = ""  # how the calls were captured, or why they were not
    biases: list[dict[str, Any]] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)  # part -> the exception, last frame
    rotary_calls: int = 0  # calls of the text model's rotary modules during the forward
    unrotated: dict[str, Any] = field(default_factory=dict)  # a rope_slice family's text run


def last_frame(exc: BaseException) -> str:
    """``Type: message (file:line in function)`` of the innermost frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    if frames:
        f = frames[-1]
        where = f" ({Path(f.filename).parent.name}/{Path(f.filename).name}:{f.lineno} in {f.name})"
    message = " ".join(str(exc).split())
    if len(message) > 200:
        message = message[:197] + "..."
    return f"{type(exc).__name__}: {message}{where}"


def to_numpy(t: Any) -> np.ndarray:
    return t.detach().to("cpu").double().numpy().copy()
