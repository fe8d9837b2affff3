"""ONNX Runtime's ``com.microsoft`` ``RotaryEmbedding`` (CPU), the operator its transformer
optimizers emit: ``--backend peer:onnxruntime-contrib``; caches and layouts as
:mod:`.onnxruntime` builds them for the opset-23 operator."""

from __future__ import annotations

from typing import Any

from ..numpy import BACKEND as NUMPY
from ._common import peer_backend
from .onnxruntime import CONTRIB, PACKAGES, rope_of


def rope(x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
         rotary_dim: int | None = None, scaling: dict[str, Any] | None = None,
         seq_len: int | None = None) -> Any:
    return rope_of(CONTRIB, x, positions, base, layout, rotary_dim, scaling)


BACKEND = peer_backend(NUMPY, "peer:onnxruntime-contrib", packages=PACKAGES,
                       version_of=("onnxruntime",), dtypes=("float32", "float16"),
                       overrides={"rope": rope})
