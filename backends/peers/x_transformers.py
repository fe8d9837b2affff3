"""x-transformers (lucidrains) as a posenc backend: ``--backend peer:x-transformers``.

- rope: ``RotaryEmbedding(dim=r, base=base, interpolation_factor=f, base_rescale_factor=s)``
  (linear scaling is its interpolation factor, static NTK its base rescale) and
  ``apply_rotary_pos_emb``; its ``rotate_half`` pairs (2i, 2i + 1), so the half layout runs
  on permuted features (pairs (i, i + r/2) moved next to each other and back: exact);
- xpos: the same with ``use_xpos=True``: queries take its scale, keys ``scale ** -1`` (as its
  ``Attention`` does); it centres the scale at (max position + 1) // 2;
- t5_bucket / t5_bias: ``RelativePositionBias`` (``causal`` is not bidirectional, scale 1),
  queries at the last q_len of the k_len positions;
- alibi_slopes / alibi_bias: ``AlibiPositionalBias``, the symmetric form ``-m·|i − j|``;
- sinusoidal: ``ScaledSinusoidalEmbedding`` (concat layout) with its learned scale set to 1.

Its frequencies and slopes are float32 tensors (float64 out of scope); modules run in the
dtype under test, as in a model of that dtype.
"""

from __future__ import annotations

from typing import Any

from ..torch import BACKEND as TORCH
from ._common import as_bhsd, peer_backend, require, rotary_dim_of, via_interleaved

FLOAT32_BY_DESIGN = "x-transformers builds its frequencies and slopes as float32 tensors"
ZERO_DIVISION = ("RotaryEmbedding(2) divides by dim - 2 (its NTK base rescale, even at factor "
                 "1): ZeroDivisionError for a rotary width of 2 (docs/known-issues.md)")


def _kind(scaling: dict[str, Any] | None) -> tuple[float, float]:
    """(interpolation_factor, base_rescale_factor) of a linear or static NTK scaling."""
    if scaling is None:
        return 1.0, 1.0
    kind = scaling.get("rope_type", scaling.get("type"))
    require(kind in ("linear", "ntk") and set(scaling) <= {"rope_type", "type", "factor"},
            f"x-transformers' RotaryEmbedding has linear and static NTK scaling only, not {kind!r}")
    factor = float(scaling["factor"])
    require(factor >= 1.0, "x-transformers asserts a scaling factor of at least 1")
    return (factor, 1.0) if kind == "linear" else (1.0, factor)


def _rotate(x: Any, positions: Any, rotary: Any, sign: float, layout: str, r: int) -> Any:
    import torch
    from x_transformers.x_transformers import apply_rotary_pos_emb

    require(x.dtype != torch.float64, FLOAT32_BY_DESIGN)
    if layout == "half":
        return via_interleaved(x, r, lambda y: _rotate(y, positions, rotary, sign,
                                                       "interleaved", r))
    shape, pos = as_bhsd(tuple(x.shape), None if positions is None else positions.cpu().numpy())
    with torch.no_grad():
        freqs, scale = rotary.to(x.device)(torch.from_numpy(pos).to(x.device))
        out = apply_rotary_pos_emb(x.reshape(shape), freqs,
                                   scale ** sign if torch.is_tensor(scale) else scale)
    return out.reshape(x.shape)


def rope(x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
         rotary_dim: int | None = None, scaling: dict[str, Any] | None = None,
         seq_len: int | None = None) -> Any:
    from x_transformers.x_transformers import RotaryEmbedding

    linear, ntk = _kind(scaling)
    r = rotary_dim_of(x.shape[-1], rotary_dim, scaling)
    require(x.shape[-2] > 0, "x-transformers' RotaryEmbedding takes max(positions): not empty")
    return _rotate(x, positions, RotaryEmbedding(r, base=base, interpolation_factor=linear,
                                                 base_rescale_factor=ntk), 1.0, layout, r)


def xpos(x: Any, positions: Any = None, *, kind: str = "query", scale_base: float = 512.0,
         centre: float = 0.0, base: float = 10000.0, layout: str = "interleaved",
         rotary_dim: int | None = None) -> Any:
    from x_transformers.x_transformers import RotaryEmbedding

    seq = x.shape[-2]
    require(seq > 0, "x-transformers' RotaryEmbedding takes max(positions): not empty")
    top = seq - 1 if positions is None else int(positions.max())
    require(centre == (top + 1) // 2, "x-transformers centres its xPos scale at (max position "
            f"+ 1) // 2 = {(top + 1) // 2}, not {centre}")
    r = rotary_dim_of(x.shape[-1], rotary_dim, None)
    rotary = RotaryEmbedding(r, use_xpos=True, scale_base=scale_base, base=base)
    return _rotate(x, positions, rotary, 1.0 if kind == "query" else -1.0, layout, r)


def t5_bucket(relative_position: Any, *, bidirectional: bool = True, num_buckets: int = 32,
              max_distance: int = 128) -> Any:
    from x_transformers.x_transformers import RelativePositionBias

    return RelativePositionBias._relative_position_bucket(
        relative_position, causal=not bidirectional, num_buckets=num_buckets,
        max_distance=max_distance)


def t5_bias(q_len: int, k_len: int, table: Any, *, bidirectional: bool = True,
            num_buckets: int = 32, max_distance: int = 128, query_offset: int = 0) -> Any:
    import torch
    from x_transformers.x_transformers import RelativePositionBias

    require(query_offset == k_len - q_len, "x-transformers' RelativePositionBias puts the "
            f"queries at the last q_len of the k_len positions (query_offset {k_len - q_len})")
    bias = RelativePositionBias(scale=1.0, causal=not bidirectional, num_buckets=num_buckets,
                                max_distance=max_distance, heads=table.shape[1])
    bias = bias.to(device=table.device, dtype=table.dtype)
    with torch.no_grad():
        bias.relative_attention_bias.weight.copy_(table)
        return bias(q_len, k_len)


def _alibi(num_heads: int, dtype: Any, device: Any, max_bias: float) -> Any:
    import torch
    from x_transformers.x_transformers import AlibiPositionalBias

    require(max_bias == 8.0, "x-transformers' slopes are the paper's (max_bias 8)")
    require(dtype != torch.float64, FLOAT32_BY_DESIGN)
    return AlibiPositionalBias(num_heads).to(device=device, dtype=dtype or torch.float32)


def alibi_slopes(num_heads: int, *, max_bias: float = 8.0, dtype: Any = None,
                 device: Any = None) -> Any:
    return _alibi(num_heads, dtype, device, max_bias)(1, 2)[:, 0, 0] * -1


def alibi_bias(num_heads: int, q_len: int, k_len: int, *, form: str = "causal",
               max_bias: float = 8.0, head_dim: int | None = None, dtype: Any = None,
               device: Any = None) -> Any:
    require(form == "symmetric", "x-transformers' AlibiPositionalBias is the symmetric form "
            "-m·|i − j| (a causal mask removes j > i), not the causal or key-only one")
    require(head_dim is None, "x-transformers adds the bias after the 1/sqrt(d) scaling")
    return _alibi(num_heads, dtype, device, max_bias)(q_len, k_len)


def sinusoidal(positions: Any, dim: int, *, base: float = 10000.0, layout: str = "interleaved",
               padding_idx: int | None = None, dtype: Any = None, device: Any = None) -> Any:
    import torch
    from x_transformers.x_transformers import ScaledSinusoidalEmbedding

    require(layout == "concat", "ScaledSinusoidalEmbedding is the concat layout (sin, cos)")
    require(dim % 2 == 0, "ScaledSinusoidalEmbedding asserts an even dim")
    require(padding_idx is None, "ScaledSinusoidalEmbedding has no padding row")
    require(dtype != torch.float64, FLOAT32_BY_DESIGN)
    layer = ScaledSinusoidalEmbedding(dim, theta=base).to(positions.device)
    with torch.no_grad():
        layer.scale.fill_(1.0)
        flat = positions.reshape(-1)
        # einsum needs positions in the frequencies' dtype (float32), as a caller passes them
        out = layer(flat[None, :, None], pos=flat.to(torch.float32))
    return out.reshape(*positions.shape, dim).to(device=device or positions.device,
                                                 dtype=dtype or torch.float32)


BACKEND = peer_backend(
    TORCH, "peer:x-transformers",
    packages={"torch": "torch", "x_transformers": "x-transformers"},
    version_of=("x-transformers", "torch"), dtypes=("float64", "float32", "bfloat16", "float16"),
    overrides={"rope": rope, "xpos": xpos, "t5_bucket": t5_bucket, "t5_bias": t5_bias,
               "alibi_slopes": alibi_slopes, "alibi_bias": alibi_bias, "sinusoidal": sinusoidal},
    notes={
        "*/t5_bucket/property:t5_bucket_exact*": "a drawn distance at a float32 log tie (2^17): "
        "x-transformers' float32 log, as the float32_log diagnosis of the tie cases",
        "*/rope/*two_dims": ZERO_DIVISION, "*/rope/property:rope_partial_tail": ZERO_DIVISION,
    })
