"""The records of ``posenc sweep transformers``'s observer (:mod:`.transformers_families`):
a family, what was observed of it, and the helpers every observation uses, the engine
sweeps' too (a family observed in its own forked process)."""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Callable
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


TIMEOUT = 300.0  # seconds for one family, in its own process


def _child(fn: Callable[[Any], Any], arg: Any, pipe: Any) -> None:
    try:
        pipe.send(("ok", fn(arg)))
    except BaseException as exc:  # the parent reports it as the family's verdict
        pipe.send(("error", last_frame(exc)))
    finally:
        pipe.close()


def run_forked(fn: Callable[[Any], Any], arg: Any, timeout: float = TIMEOUT) -> Any:
    """``fn(arg)`` in a forked process, so that a family that exhausts memory or hangs costs
    its own verdict only; RuntimeError saying why when it gives no result."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(fn, arg, send), daemon=True)
    process.start()
    send.close()
    try:
        if not receive.poll(timeout):
            raise RuntimeError(f"no result in {timeout:.0f} s")
        kind, value = receive.recv()
    except EOFError:
        process.join(5.0)
        code = process.exitcode
        raise RuntimeError(f"the process died (exit code {code}"
                           + (": killed, likely out of memory)" if code == -9 else ")")
                           ) from None
    finally:
        process.join(5.0)
        if process.is_alive():
            process.kill()
            process.join()
        receive.close()
    if kind == "error":
        raise RuntimeError(value)
    return value
