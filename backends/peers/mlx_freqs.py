"""MLX's ``mx.fast.rope`` given ``freqs`` (the periods ``base^(2i/r)``, float64 stored in
float32) instead of ``base``: ``--backend peer:mlx-freqs``, the path mlx-lm's scaled ropes take
(see :mod:`.mlx`)."""

from __future__ import annotations

from typing import Any

from ..numpy import BACKEND as NUMPY
from ._common import peer_backend
from .mlx import PACKAGES, rope_of


def rope(x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
         rotary_dim: int | None = None, scaling: dict[str, Any] | None = None,
         seq_len: int | None = None) -> Any:
    return rope_of(x, positions, base=base, layout=layout, rotary_dim=rotary_dim,
                   scaling=scaling, freqs=True)


BACKEND = peer_backend(NUMPY, "peer:mlx-freqs", packages=PACKAGES, version_of=("mlx",),
                       dtypes=("float32", "float16"), overrides={"rope": rope})
