"""transformers' MPT ALiBi as a posenc backend: ``--backend peer:transformers-mpt``.

``build_mpt_alibi_tensor(num_heads, k_len, alibi_bias_max)`` is ``m·(j − (k_len − 1))``, one
row for every query: the causal and key-only forms up to a constant per query row, which is
what softmax sees (compared ``softmax_equivalent``, as alibi_bias's spec allows). Slopes are
minus its first entry at k_len 2. float32 by design.
"""

from __future__ import annotations

from typing import Any

from ..torch import BACKEND as TORCH
from ._common import peer_backend, require


def _mpt(num_heads: int, k_len: int, max_bias: float, dtype: Any, device: Any) -> Any:
    import torch
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    require(dtype is None or dtype != torch.float64, "MPT builds its ALiBi in float32")
    bias = build_mpt_alibi_tensor(num_heads, k_len, alibi_bias_max=max_bias, device=device)
    return bias.to(dtype or torch.float32)  # [num_heads, 1, k_len]


def alibi_slopes(num_heads: int, *, max_bias: float = 8.0, dtype: Any = None,
                 device: Any = None) -> Any:
    return -_mpt(num_heads, 2, max_bias, dtype, device)[:, 0, 0]


# The spec's signature and checks, as in peers/transformers.py's BLOOM adapter: each adapter
# states its own library's refusals and builds with its own library's code, not a shared one.
def alibi_bias(num_heads: int, q_len: int, k_len: int, *, form: str = "causal",
               max_bias: float = 8.0, head_dim: int | None = None, dtype: Any = None,
               device: Any = None) -> Any:
    require(head_dim is None, "MPT adds the bias after the 1/sqrt(d) scaling; Falcon's "
            "order (head_dim) is not its")
    require(form in ("causal", "key_only"), "MPT's bias m·(j − (k_len − 1)) is softmax-"
            "equivalent to the causal and key-only forms, not the symmetric one")
    bias = _mpt(num_heads, k_len, max_bias, dtype, device)
    return bias if form == "key_only" else bias.expand(num_heads, q_len, k_len)


BACKEND = peer_backend(
    TORCH, "peer:transformers-mpt", packages={"torch": "torch", "transformers": "transformers"},
    version_of=("transformers", "torch"), dtypes=("float64", "float32", "bfloat16", "float16"),
    overrides={"alibi_slopes": alibi_slopes, "alibi_bias": alibi_bias},
    comparisons={"alibi_bias": "softmax_equivalent"})
