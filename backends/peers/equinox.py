"""Equinox as a posenc backend (JAX): ``--backend peer:equinox``.

rope: ``eqx.nn.RotaryPositionalEmbedding(embedding_size=dim, theta=base, dtype=x.dtype)``
called on each ``[seq, dim]`` slice of x (``jax.vmap`` over the leading axes, as its docs
vmap over heads): half layout (its ``rotate_half``), the whole head, positions 0..seq-1
only (it takes no positions), no scaling.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..jax import BACKEND as JAX
from ._common import peer_backend, require, rotary_dim_of


def rope(x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
         rotary_dim: int | None = None, scaling: dict[str, Any] | None = None,
         seq_len: int | None = None) -> Any:
    import equinox as eqx
    import jax

    require(layout == "half", "eqx.nn.RotaryPositionalEmbedding pairs (i, i + d/2) only")
    require(scaling is None, "eqx.nn.RotaryPositionalEmbedding has no scaling schedules")
    seq, dim = x.shape[-2:]
    require(rotary_dim_of(dim, rotary_dim, None) == dim, "eqx.nn.RotaryPositionalEmbedding "
            "rotates the whole embedding")
    require(positions is None or bool(np.all(np.asarray(positions) == np.arange(seq))),
            "eqx.nn.RotaryPositionalEmbedding takes no positions: 0..seq-1 only")
    embed = eqx.nn.RotaryPositionalEmbedding(embedding_size=dim, theta=base, dtype=x.dtype)
    flat = x.reshape(-1, seq, dim)
    return jax.vmap(embed)(flat).reshape(x.shape)


BACKEND = peer_backend(JAX, "peer:equinox", packages={"jax": "jax", "equinox": "equinox"},
                       version_of=("equinox", "jax"), overrides={"rope": rope})
