"""Backends with the porting bugs of rotary encodings: float32 angles m * theta (what most
frameworks compute), positions rounded to bfloat16, LongRoPE switching at seq_len = L0,
YaRN without the floor/ceil of its correction range, a dropped attention factor."""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np

from posenc.encodings import public_functions
from posenc.rotary import rotation

from .overrides import _mutant

_IMPL = public_functions()


def _naive_phases(xp: Any, positions: Any, inv_freq: np.ndarray, *, compute: Any,
                  device: Any, integral: bool = False) -> Any:
    return positions * xp.asarray(np.asarray(inv_freq), dtype=compute)


def _rope_float32_angles(*args: Any, **kw: Any) -> Any:
    with mock.patch.object(rotation, "phases", _naive_phases):
        return _IMPL["rope"](*args, **kw)


FLOAT32_ANGLES = _mutant("float32_angles", rope=_rope_float32_angles)


def _rope_bf16_positions(x: Any, positions: Any = None, **kw: Any) -> Any:
    import ml_dtypes

    positions = np.arange(np.shape(x)[-2]) if positions is None else np.asarray(positions)
    rounded = positions.astype(ml_dtypes.bfloat16).astype(np.float64).astype(np.int64)
    return _IMPL["rope"](x, rounded, **kw)


BF16_POSITIONS = _mutant("bf16_positions", rope=_rope_bf16_positions)


def _longrope(scaling: Any) -> bool:
    return bool(scaling) and scaling.get("rope_type", scaling.get("type")) == "longrope"


def _frequencies_inclusive(dim: int, *, scaling: Any = None, seq_len: Any = None,
                           **kw: Any) -> Any:
    """Long factors from seq_len >= L0 on (the switch must be strictly beyond L0)."""
    if _longrope(scaling) and seq_len is not None:
        seq_len += 1
    return _IMPL["rope_frequencies"](dim, scaling=scaling, seq_len=seq_len, **kw)


LONGROPE_INCLUSIVE = _mutant("longrope_inclusive", rope_frequencies=_frequencies_inclusive)


def _untruncated(scaling: Any) -> Any:
    if scaling and scaling.get("rope_type", scaling.get("type")) == "yarn":
        return {"truncate": False, **scaling}
    return scaling


def _frequencies_untruncated(dim: int, *, scaling: Any = None, **kw: Any) -> Any:
    return _IMPL["rope_frequencies"](dim, scaling=_untruncated(scaling), **kw)


def _rope_untruncated(*args: Any, scaling: Any = None, **kw: Any) -> Any:
    return _IMPL["rope"](*args, scaling=_untruncated(scaling), **kw)


YARN_UNTRUNCATED = _mutant("yarn_untruncated", rope_frequencies=_frequencies_untruncated,
                           rope=_rope_untruncated)


def _rope_without_attention_factor(*args: Any, scaling: Any = None, **kw: Any) -> Any:
    if scaling and scaling.get("rope_type", scaling.get("type")) in ("yarn", "longrope"):
        scaling = {**scaling, "attention_factor": 1.0}
    return _IMPL["rope"](*args, scaling=scaling, **kw)


NO_ATTENTION_FACTOR = _mutant("no_attention_factor", rope=_rope_without_attention_factor)
