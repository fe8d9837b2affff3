"""llama.cpp's ggml (ggml-python's bindings, ggml-cpu) as a posenc backend: ``--backend peer:ggml``.

- ggml_rope: ``ggml_rope_ext`` (modes normal, neox) and ``ggml_rope_multi`` (mrope, imrope,
  vision), with the ``rope_freqs`` tensor (freq_factors) and YaRN's ``ext_factor``, in float32
  and float16 (x and the result in that type, as a llama.cpp graph holds them): posenc's
  transcription ``posenc.ggml_rope`` checked against the engine it transcribes.
- rope: the same operator on a transformers rope (no scaling, or linear as ``freq_scale``):
  half layout as mode neox, interleaved as normal, ``rotary_dim`` as ``n_dims``.

One graph per call: x ``[..., seq, dim]`` goes in as ggml's ``[dim, heads, seq]`` (NumPy
``[seq, heads, dim]``), positions as int32 (``[4 * seq]`` for the multi modes). ggml's
positions are int32: a position outside int32 is out of scope.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ..numpy import BACKEND as NUMPY
from ._common import peer_backend, require, rotary_dim_of

MODE = {"normal": 0, "neox": 2, "mrope": 8, "vision": 24, "imrope": 40}
INT32 = np.iinfo(np.int32)


def _run(x: np.ndarray, positions: np.ndarray, freq_factors: np.ndarray | None, *, n_dims: int,
         mode: str, sections: list[int] | None, n_ctx_orig: int, freq_base: float,
         freq_scale: float, ext_factor: float, attn_factor: float, beta_fast: float,
         beta_slow: float) -> np.ndarray:
    """ggml's rope of x ``[seq, heads, dim]`` (float32 or float16) at int32 positions."""
    import ggml
    import ggml.utils

    size = 4 * (x.nbytes + positions.nbytes + 64 * x.shape[-1]) + 16 * ggml.ggml_tensor_overhead() \
        + ggml.ggml_graph_overhead() + (1 << 20)
    ctx = ggml.ggml_init(ggml.ggml_init_params(mem_size=size, mem_buffer=None))
    try:
        a = ggml.utils.from_numpy(np.ascontiguousarray(x), ctx)
        b = ggml.utils.from_numpy(np.ascontiguousarray(positions, dtype=np.int32), ctx)
        c = None if freq_factors is None else ggml.utils.from_numpy(
            np.ascontiguousarray(freq_factors, dtype=np.float32), ctx)
        floats = (freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow)
        if sections is None:
            out = ggml.ggml_rope_ext(ctx, a, b, c, n_dims, MODE[mode], n_ctx_orig, *floats)
        else:
            out = ggml.ggml_rope_multi(ctx, a, b, c, n_dims, (ctypes.c_int * 4)(*sections),
                                       MODE[mode], n_ctx_orig, *floats)
        graph = ggml.ggml_new_graph(ctx)
        ggml.ggml_build_forward_expand(graph, out)
        ggml.ggml_graph_compute_with_ctx(ctx, graph, 1)
        # to_numpy drops ggml's trailing dims of size 1: the shape of x, given back
        return np.array(ggml.utils.to_numpy(out), copy=True).reshape(x.shape)
    finally:
        ggml.ggml_free(ctx)


def _as_seq_heads(x: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]]:
    """x [..., seq, dim] as [seq, heads, dim] (ggml's [dim, heads, seq]) and the shape back."""
    require(x.dtype in (np.float32, np.float16), "ggml-cpu's rope takes float32 or float16 x")
    lead = x.shape[:-2]
    flat = x.reshape(-1, *x.shape[-2:])  # [heads, seq, dim]
    return np.ascontiguousarray(np.swapaxes(flat, 0, 1)), lead


def _back(y: np.ndarray, lead: tuple[int, ...], shape: tuple[int, ...]) -> np.ndarray:
    return np.swapaxes(y, 0, 1).reshape(*lead, *shape[-2:]) if lead else y[:, 0, :].reshape(shape)


def _positions(positions: Any, rows: int, seq: int) -> np.ndarray:
    pos = np.asarray(positions).reshape(rows, seq)
    require(pos.size == 0 or (pos.min() >= INT32.min and pos.max() <= INT32.max),
            "ggml's positions are int32")
    return pos.astype(np.int32).reshape(-1)


def ggml_rope(x: Any, positions: Any, *, n_dims: int | None = None, mode: str = "normal",
              freq_base: float = 10000.0, freq_scale: float = 1.0, ext_factor: float = 0.0,
              attn_factor: float = 1.0, beta_fast: float = 32.0, beta_slow: float = 1.0,
              n_ctx_orig: int = 0, sections: Any = None, freq_factors: Any = None) -> Any:
    x = np.asarray(x)
    seq, dim = x.shape[-2:]
    if n_dims is None:
        n_dims = dim // 2 if mode == "vision" else dim
    # what ggml asserts (an assert aborts the process): checked first, as posenc's scope
    require(mode in MODE and 2 <= int(n_dims) <= dim and int(n_dims) % 2 == 0,
            f"ggml aborts on n_dims={n_dims} (odd or past dim={dim}) or mode={mode!r}")
    multi = sections is not None
    require(not multi or sum(int(s) for s in sections) > 0, "ggml divides by sum(sections)")
    xs, lead = _as_seq_heads(x)
    factors = None if freq_factors is None else np.asarray(freq_factors, dtype=np.float32)
    y = _run(xs, _positions(positions, 4 if multi else 1, seq), factors, n_dims=int(n_dims),
             mode=mode, sections=None if not multi else [int(s) for s in sections],
             n_ctx_orig=int(n_ctx_orig), freq_base=freq_base, freq_scale=freq_scale,
             ext_factor=ext_factor, attn_factor=attn_factor, beta_fast=beta_fast,
             beta_slow=beta_slow)
    return _back(y, lead, x.shape)


def rope(x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
         rotary_dim: int | None = None, scaling: dict[str, Any] | None = None,
         seq_len: int | None = None) -> Any:
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type"))
    require(scaling is None or (kind == "linear" and set(scaling) <= {"rope_type", "type",
                                                                      "factor"}),
            f"the adapter maps no scaling and linear (freq_scale) only, not {kind!r}: "
            "posenc.dialects.to_ggml's parameters run through peer:ggml's ggml_rope")
    x = np.asarray(x)
    seq = x.shape[-2]
    pos = np.arange(seq) if positions is None else np.asarray(positions)
    require(pos.ndim == 1, "ggml's rope takes one positions row per graph")
    factor = float(scaling["factor"]) if scaling else 1.0
    return ggml_rope(x, pos, n_dims=rotary_dim_of(x.shape[-1], rotary_dim, None),
                     mode="neox" if layout == "half" else "normal", freq_base=base,
                     freq_scale=1.0 / factor)


BACKEND = peer_backend(NUMPY, "peer:ggml", packages={"ggml": "ggml-python"},
                       version_of=("ggml-python",), dtypes=("float32", "float16"),
                       overrides={"ggml_rope": ggml_rope, "rope": rope})
