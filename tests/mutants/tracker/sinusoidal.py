"""Sinusoidal-table porting bugs: the halves swapped and the frequency denominator."""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import IMPL, Group

MUTANTS = Group()


def _sinusoidal_cos_first(positions: Any, dim: int, *, layout: str = "interleaved",
                          **kw: Any) -> Any:
    out = IMPL["sinusoidal"](positions, dim, layout=layout, **kw)
    if layout != "concat":
        return out
    out = np.asarray(out)
    sin, cos = out[..., : (dim + 1) // 2], out[..., (dim + 1) // 2:]
    return np.concatenate([cos, sin], axis=-1)


def _sinusoidal_half_minus_one(positions: Any, dim: int, *, layout: str = "interleaved",
                               **kw: Any) -> Any:
    if layout != "concat" or dim % 2 or dim < 4:
        return IMPL["sinusoidal"](positions, dim, layout=layout, **kw)
    return IMPL["sinusoidal"](positions, dim, layout="t2t", **kw)


MUTANTS.add("sinusoidal_cos_first",
            "flashinfer-ai/flashinfer#3819: timestep embedding halves swapped ([cos | sin])",
            ("sinusoidal",), sinusoidal=_sinusoidal_cos_first)
MUTANTS.add("sinusoidal_denominator_half_minus_one",
            "huggingface/blog#2183: frequencies log(10000)/(half_dim - 1) in a [sin | cos] table "
            "that divides by half_dim", ("sinusoidal",), sinusoidal=_sinusoidal_half_minus_one)
