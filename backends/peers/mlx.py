"""MLX's fused rope (``mx.fast.rope``, CPU) as a posenc backend: ``--backend peer:mlx``.

``mx.fast.rope(x, dims, traditional=..., base=..., scale=..., offset=...)`` on x
``[batch, heads, seq, dim]``: ``traditional`` is the interleaved layout, ``dims`` the rotated
features, ``scale`` multiplies the positions (linear scaling: ``1 / factor``), ``offset`` (one
per batch row) starts each row's positions. Positions that are not one run per batch row go
one token per example (``[batch·seq, heads, 1, dim]`` with an offset each), as decoding
does. ``peer:mlx-freqs`` passes ``freqs`` (the periods ``base^(2i/r)``, computed in float64 and
stored in float32, as mlx-lm's scaled ropes pass theirs) instead of ``base``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..numpy import BACKEND as NUMPY
from ._common import as_bhsd, peer_backend, require, rotary_dim_of

INT32 = np.iinfo(np.int32)


def rotate_runs(x: Any, positions: Any, rotate: Any) -> Any:
    """x [..., seq, dim] (NumPy) as [batch, heads, seq, dim] through ``rotate(x4, offsets)``
    (MLX arrays: x4 and one int32 offset per row), one run of positions per batch row or one
    token per example (``[batch·seq, heads, 1, dim]``) when they are not runs."""
    import mlx.core as mx

    x = np.asarray(x)
    require(x.dtype in (np.float32, np.float16), "mx.fast.rope on CPU: float32 or float16 "
            "(MLX has no float64 kernel)")
    shape, pos = as_bhsd(x.shape, None if positions is None else np.asarray(positions))
    require(pos.size == 0 or (pos.min() >= INT32.min and pos.max() <= INT32.max),
            "MLX's offsets are int32")
    batch, heads, seq, dim = shape
    x4 = x.reshape(shape)
    runs = seq == 0 or bool(np.all(pos - pos[:, :1] == np.arange(seq)))
    if runs:  # one offset per batch row: how a model calls it
        offset = pos[:, 0] if seq else np.zeros(batch, np.int64)
    else:  # one token per example, each with its own offset
        x4 = x4.transpose(0, 2, 1, 3).reshape(batch * seq, heads, 1, dim)
        offset = pos.reshape(-1)
    y = rotate(mx.array(x4), mx.array(offset.astype(np.int32)))
    out = np.array(y, dtype=x.dtype)
    if not runs:
        out = out.reshape(batch, seq, heads, dim).transpose(0, 2, 1, 3)
    return out.reshape(x.shape)


def rope_of(x: Any, positions: Any, *, base: float, layout: str, rotary_dim: int | None,
            scaling: dict[str, Any] | None, freqs: bool) -> Any:
    import mlx.core as mx

    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type"))
    require(scaling is None or (kind == "linear" and set(scaling) <= {"rope_type", "type",
                                                                      "factor"}),
            f"mx.fast.rope scales positions (linear) only, not {kind!r}")
    r = rotary_dim_of(np.shape(x)[-1], rotary_dim, None)
    kwargs: dict[str, Any] = {"base": float(base)}
    if freqs:
        kwargs = {"base": None, "freqs": mx.array(
            (float(base) ** (2.0 * np.arange(r // 2) / r)).astype(np.float32))}
    factor = float(scaling["factor"]) if scaling else 1.0
    return rotate_runs(x, positions, lambda x4, offset: mx.fast.rope(
        x4, r, traditional=layout == "interleaved", scale=1.0 / factor, offset=offset,
        **kwargs))


def rope(x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
         rotary_dim: int | None = None, scaling: dict[str, Any] | None = None,
         seq_len: int | None = None) -> Any:
    return rope_of(x, positions, base=base, layout=layout, rotary_dim=rotary_dim,
                   scaling=scaling, freqs=False)


PACKAGES = {"mlx": "mlx[cpu]"}
BACKEND = peer_backend(NUMPY, "peer:mlx", packages=PACKAGES, version_of=("mlx",),
                       dtypes=("float32", "float16"), overrides={"rope": rope})
