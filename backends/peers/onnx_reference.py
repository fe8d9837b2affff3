"""The ONNX ``RotaryEmbedding`` operator (opset 23) run by ``onnx.reference``:
``--backend peer:onnx``.

The operator takes cos/sin caches and position ids; as an exporter would, the adapter builds
the caches from ``base`` (float64 angles of exact positions, stored in the dtype of x), one
row per distinct position (so negative and huge positions need no 2^20-row cache), and runs
X as [batch, heads, seq, head_size]. Both layouts and partial rotary (``rotary_embedding_dim``)
are the operator's; scaling schedules are not (they live in the caches an exporter builds).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..numpy import BACKEND as NUMPY
from ._common import as_bhsd, peer_backend, require, rotary_dim_of

OPSET = 23


def _model(shape: tuple[int, ...], dtype: np.dtype, interleaved: bool, rotary_dim: int) -> Any:
    from onnx import helper

    elem = helper.np_dtype_to_tensor_dtype(dtype)
    node = helper.make_node("RotaryEmbedding", ["X", "cos_cache", "sin_cache", "position_ids"],
                            ["Y"], interleaved=int(interleaved), rotary_embedding_dim=rotary_dim)
    inputs = [helper.make_tensor_value_info(n, elem, None) for n in ("X", "cos_cache",
                                                                     "sin_cache")]
    inputs.append(helper.make_tensor_value_info("position_ids", helper.np_dtype_to_tensor_dtype(
        np.dtype(np.int64)), None))
    graph = helper.make_graph([node], "rope", inputs, [helper.make_tensor_value_info(
        "Y", elem, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def rope(x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
         rotary_dim: int | None = None, scaling: dict[str, Any] | None = None,
         seq_len: int | None = None) -> Any:
    from onnx.reference import ReferenceEvaluator

    require(scaling is None, "the ONNX operator takes caches; scaling schedules are the "
            "exporter's (not the operator's)")
    x = np.asarray(x)
    r = rotary_dim_of(x.shape[-1], rotary_dim, None)
    shape, pos = as_bhsd(x.shape, None if positions is None else np.asarray(positions))
    rows, ids = np.unique(pos, return_inverse=True)
    theta = float(base) ** (-2.0 * np.arange(r // 2) / r)
    angles = rows.astype(np.float64)[:, None] * theta[None, :]
    feeds = {"X": x.reshape(shape), "cos_cache": np.cos(angles).astype(x.dtype),
             "sin_cache": np.sin(angles).astype(x.dtype),
             "position_ids": ids.reshape(pos.shape).astype(np.int64)}
    (y,) = ReferenceEvaluator(_model(shape, x.dtype, layout == "interleaved", r)).run(None, feeds)
    return np.asarray(y, dtype=x.dtype).reshape(x.shape)


BACKEND = peer_backend(NUMPY, "peer:onnx", packages={"onnx": "onnx"}, version_of=("onnx",),
                       overrides={"rope": rope})
