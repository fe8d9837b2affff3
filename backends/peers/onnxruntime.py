"""ONNX Runtime's ``RotaryEmbedding`` kernels (CPU) as posenc backends: ``--backend
peer:onnxruntime`` runs the opset-23 operator, ``peer:onnxruntime-contrib`` the
``com.microsoft`` one (the one ONNX Runtime's transformer optimizers emit).

Both take cos/sin caches and position ids; as an exporter would, the adapter builds the caches
from ``base`` (float64 angles of exact positions, stored in the dtype of x), one row per
distinct position (negative and huge positions need no 2^20-row cache; padded to the
sequence length, which ONNX Runtime requires, see docs/known-issues.md), and runs X as
``[batch, heads, seq, head_size]``; ``interleaved`` and ``rotary_embedding_dim`` are the
operators'. Scaling schedules are the exporter's (they live in the caches), not the operators'.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..numpy import BACKEND as NUMPY
from ._common import as_bhsd, peer_backend, require, rotary_dim_of

OPSET = 23
CONTRIB = "com.microsoft"


def _session(domain: str, dtype: np.dtype, interleaved: bool, rotary_dim: int,
             num_heads: int) -> Any:
    import onnxruntime
    from onnx import TensorProto, helper

    elem = helper.np_dtype_to_tensor_dtype(dtype)
    names = ["X", "position_ids", "cos_cache", "sin_cache"] if domain == CONTRIB else \
        ["X", "cos_cache", "sin_cache", "position_ids"]
    attrs = {"interleaved": int(interleaved), "rotary_embedding_dim": rotary_dim}
    if domain == CONTRIB:
        attrs["num_heads"] = num_heads
    node = helper.make_node("RotaryEmbedding", names, ["Y"], domain=domain, **attrs)
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64 if n == "position_ids" else elem,
                                            None) for n in names]
    graph = helper.make_graph([node], "rope", inputs,
                              [helper.make_tensor_value_info("Y", elem, None)])
    opsets = [helper.make_opsetid("", OPSET)] + ([helper.make_opsetid(CONTRIB, 1)]
                                                 if domain == CONTRIB else [])
    model = helper.make_model(graph, opset_imports=opsets)
    return onnxruntime.InferenceSession(model.SerializeToString(),
                                        providers=["CPUExecutionProvider"])


def run_operator(domain: str, x: np.ndarray, positions: np.ndarray | None, cos: np.ndarray,
                 sin: np.ndarray, *, interleaved: bool, rotary_dim: int) -> np.ndarray:
    """The operator of ``domain`` on x ``[..., seq, dim]`` with caches ``[rows, r/2]`` gathered
    by positions (``[seq]`` or ``[batch, seq]``; row indices)."""
    shape, pos = as_bhsd(x.shape, positions)
    feeds = {"X": x.reshape(shape), "cos_cache": cos, "sin_cache": sin,
             "position_ids": pos.astype(np.int64)}
    (y,) = _session(domain, x.dtype, interleaved, rotary_dim, shape[1]).run(None, feeds)
    return np.asarray(y, dtype=x.dtype).reshape(x.shape)


def rope_of(domain: str, x: Any, positions: Any, base: float, layout: str,
            rotary_dim: int | None, scaling: dict[str, Any] | None) -> Any:
    require(scaling is None, "the operator takes caches; scaling schedules are the "
            "exporter's (not the operator's)")
    x = np.asarray(x)
    require(x.dtype in (np.float32, np.float16), "ONNX Runtime's CPU kernel takes float32 "
            "or float16")
    r = rotary_dim_of(x.shape[-1], rotary_dim, None)
    _, pos = as_bhsd(x.shape, None if positions is None else np.asarray(positions))
    rows, ids = np.unique(pos, return_inverse=True)
    theta = float(base) ** (-2.0 * np.arange(r // 2) / r)
    angles = rows.astype(np.float64)[:, None] * theta[None, :]
    # ONNX Runtime refuses caches with fewer rows than the sequence, whatever the position ids
    # (docs/known-issues.md): unused rows pad them
    pad = np.zeros((max(0, pos.shape[1] - len(rows)), r // 2))
    cos, sin = (np.concatenate([f(angles), pad]).astype(x.dtype) for f in (np.cos, np.sin))
    return run_operator(domain, x, ids.reshape(pos.shape), cos, sin,
                        interleaved=layout == "interleaved", rotary_dim=r)


def rope(x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
         rotary_dim: int | None = None, scaling: dict[str, Any] | None = None,
         seq_len: int | None = None) -> Any:
    return rope_of("", x, positions, base, layout, rotary_dim, scaling)


PACKAGES = {"onnxruntime": "onnxruntime", "onnx": "onnx"}
BACKEND = peer_backend(NUMPY, "peer:onnxruntime", packages=PACKAGES,
                       version_of=("onnxruntime",), dtypes=("float32", "float16"),
                       overrides={"rope": rope})
