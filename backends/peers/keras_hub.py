"""keras-hub's layers as a posenc backend: ``--backend peer:keras-hub``.

- rope: ``RotaryEmbedding`` (half layout, whole head, linear ``scaling_factor``), called as a
  model does: ``start_index`` for contiguous positions, ``positions`` (float32) otherwise;
- sinusoidal: ``SinePositionEncoding`` (interleaved layout, no padding row), the same way;
- alibi_slopes / alibi_bias: ``AlibiBias`` added to zero scores: ``m·(j − (k_len − 1))`` on
  every row (compared ``softmax_equivalent``; slopes are minus its first entry at k_len 2).

The layers run on whatever Keras backend is configured (``KERAS_BACKEND``, read by Keras at
its import); the adapter changes no global. Arrays cross as NumPy (float32 for bfloat16
inputs; the layer's dtype policy is the dtype under test) and come back as torch tensors.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..torch import BACKEND as TORCH
from ._common import as_bhsd, peer_backend, require


def _name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _host(x: Any) -> np.ndarray:
    import torch

    return x.detach().cpu().to(torch.float32 if x.dtype.itemsize < 4 else x.dtype).numpy()


def _back(out: Any, dtype: Any, device: Any) -> Any:
    """A layer's output as a torch tensor of ``dtype``."""
    import torch

    if not isinstance(out, torch.Tensor):
        from keras import ops

        out = ops.convert_to_numpy(ops.cast(out, "float32") if _name(dtype) == "bfloat16"
                                   else out)
        out = torch.from_numpy(np.array(out))
    return out.to(device=device, dtype=dtype)


def _contiguous(pos: np.ndarray) -> bool:
    return pos.ndim == 1 and pos.size > 0 and bool(np.all(np.diff(pos) == 1))


def rope(x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
         rotary_dim: int | None = None, scaling: dict[str, Any] | None = None,
         seq_len: int | None = None) -> Any:
    import keras_hub

    require(layout == "half", "keras-hub's RotaryEmbedding pairs (i, i + d/2) only")
    require(rotary_dim is None, "keras-hub's RotaryEmbedding rotates the whole feature axis")
    factor = 1.0
    if scaling is not None:
        kind = scaling.get("rope_type", scaling.get("type"))
        require(kind == "linear" and set(scaling) <= {"rope_type", "type", "factor"},
                f"keras-hub's RotaryEmbedding has linear scaling_factor only (not {kind!r})")
        factor = float(scaling["factor"])
    layer = keras_hub.layers.RotaryEmbedding(max_wavelength=float(base), scaling_factor=factor,
                                             sequence_axis=1, feature_axis=-1,
                                             dtype=_name(x.dtype))
    shape, pos = as_bhsd(tuple(x.shape), None if positions is None else positions.cpu().numpy())
    inputs = _host(x).reshape(shape).transpose(0, 2, 1, 3)  # [batch, seq, heads, dim]
    given = None if positions is None else positions.cpu().numpy()
    if given is None or _contiguous(given):
        out = layer(inputs, start_index=0 if given is None else int(given[0]))
    else:
        out = layer(inputs, positions=pos.astype(np.float32))
    out = _back(out, x.dtype, x.device)
    return out.permute(0, 2, 1, 3).reshape(x.shape)


def sinusoidal(positions: Any, dim: int, *, base: float = 10000.0, layout: str = "interleaved",
               padding_idx: int | None = None, dtype: Any = None, device: Any = None) -> Any:
    import keras_hub
    import torch

    require(layout == "interleaved", "keras-hub's SinePositionEncoding is interleaved only")
    require(padding_idx is None, "keras-hub's SinePositionEncoding has no padding row")
    dtype = dtype or torch.float32
    layer = keras_hub.layers.SinePositionEncoding(max_wavelength=float(base), dtype=_name(dtype))
    pos = positions.cpu().numpy()
    flat = pos.reshape(1, -1)
    zeros = np.zeros((1, flat.shape[1], dim), np.float32)
    if _contiguous(flat[0]):
        out = layer(zeros, start_index=int(flat[0, 0]))
    else:
        out = layer(zeros, positions=flat.astype(np.float32))
    return _back(out, dtype, device or positions.device).reshape(*pos.shape, dim)


def _alibi(num_heads: int, k_len: int, max_bias: float, dtype: Any, device: Any) -> Any:
    import keras_hub
    import torch

    dtype = dtype or torch.float32
    layer = keras_hub.layers.AlibiBias(alibi_bias_max=max_bias, dtype=_name(dtype))
    out = layer(np.zeros((1, num_heads, 1, k_len), np.float32))
    return _back(out, dtype, device)[0]  # [num_heads, 1, k_len]: m·(j − (k_len − 1))


def alibi_slopes(num_heads: int, *, max_bias: float = 8.0, dtype: Any = None,
                 device: Any = None) -> Any:
    return -_alibi(num_heads, 2, max_bias, dtype, device)[:, 0, 0]


def alibi_bias(num_heads: int, q_len: int, k_len: int, *, form: str = "causal",
               max_bias: float = 8.0, head_dim: int | None = None, dtype: Any = None,
               device: Any = None) -> Any:
    require(head_dim is None, "keras-hub's AlibiBias adds the bias after the 1/sqrt(d) "
            "scaling; Falcon's order (head_dim) is not its")
    require(form in ("causal", "key_only"), "keras-hub's AlibiBias m·(j − (k_len − 1)) is "
            "softmax-equivalent to the causal and key-only forms, not the symmetric one")
    require(k_len > 0, "keras-hub's AlibiBias needs at least one key")
    bias = _alibi(num_heads, k_len, max_bias, dtype, device)
    return bias if form == "key_only" else bias.expand(num_heads, q_len, k_len)


BACKEND = peer_backend(
    TORCH, "peer:keras-hub",
    packages={"torch": "torch", "keras": "keras", "keras_hub": "keras-hub"},
    version_of=("keras-hub", "keras"), dtypes=("float64", "float32", "bfloat16", "float16"),
    overrides={"rope": rope, "sinusoidal": sinusoidal, "alibi_slopes": alibi_slopes,
               "alibi_bias": alibi_bias},
    comparisons={"alibi_bias": "softmax_equivalent"},
    notes={
        "*/sinusoidal/*": "SinePositionEncoding builds positions, frequencies and angles in the "
        "layer's compute dtype (bfloat16: 4095 becomes 4096; float16: NaN past 65504)",
    })
