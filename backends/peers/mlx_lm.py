"""mlx-lm's rope modules as a posenc backend: ``--backend peer:mlx-lm``.

rope: ``initialize_rope(r, base, traditional, scaling_config, max_position_embeddings)``, the
module an mlx-lm model builds from its config (``nn.RoPE`` for default and linear,
``Llama3RoPE``, ``YarnRoPE``, ``SuScaledRoPE`` for longrope, ``DynamicNTKScalingRoPE``,
``ProportionalRoPE``), called on x ``[batch, heads, seq, dim]`` with an offset per batch
row as a model does (see :mod:`.mlx` for positions that are not runs). The config's
``rope_theta`` wins over ``base``; ``traditional`` is the interleaved layout.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..numpy import BACKEND as NUMPY
from ._common import peer_backend, require, rotary_dim_of
from .mlx import rotate_runs


def rope(x: Any, positions: Any = None, *, base: float = 10000.0, layout: str = "half",
         rotary_dim: int | None = None, scaling: dict[str, Any] | None = None,
         seq_len: int | None = None) -> Any:
    from mlx_lm.models.rope_utils import initialize_rope

    config = dict(scaling or {})
    kind = config.get("rope_type", config.get("type", "default"))
    require(kind != "ntk", "mlx-lm has no static NTK rope (only the dynamic one)")
    require(seq_len is None, "mlx-lm's rope modules take no seq_len")
    base = float(config.pop("rope_theta", base))
    original = config.get("original_max_position_embeddings", 2048)
    # a model's config: longrope's factor is max_position_embeddings / original (transformers
    # derives one from the other; mlx-lm's SuScaledRoPE reads the ratio, not "factor")
    max_positions = config.pop("max_position_embeddings",
                               int(config.get("factor", 1.0) * original) if kind == "longrope"
                               else original)
    r = rotary_dim_of(np.shape(x)[-1], rotary_dim, None if kind == "proportional" else scaling)
    module = initialize_rope(r, base, layout == "interleaved", config or None, max_positions)
    return rotate_runs(x, positions, lambda x4, offset: module(x4, offset=offset))


LONG_ALWAYS = ("mlx-lm's SuScaledRoPE divides by long_factor at every length (short_factor is "
               "never read; transformers uses it below original_max_position_embeddings): "
               "no profile can judge the gap here, tests/peers/test_peer_libraries.py shows it")
BACKEND = peer_backend(
    NUMPY, "peer:mlx-lm", packages={"mlx": "mlx[cpu]", "mlx_lm": "mlx-lm"},
    version_of=("mlx-lm", "mlx"), dtypes=("float32", "float16"), overrides={"rope": rope},
    notes={"*/rope/case:longrope_short_at_runtime": LONG_ALWAYS,
           "*/rope/case:named_phi_3_5_mini_short": LONG_ALWAYS,
           "*/rope/case:named_gpt_oss_20b": "initialize_rope does not pass YaRN's truncate: "
           "YarnRoPE always floors/ceils the correction range (gpt-oss has truncate: false)"})
