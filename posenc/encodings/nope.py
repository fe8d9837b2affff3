"""NoPE: no positional encoding, the identity on queries and keys (a drop-in for a rotary
layer that takes positions and ignores them)."""

from __future__ import annotations

from typing import Any

from .. import array_api, validation

__all__ = ["nope"]

_INPUTS = validation.Inputs("nope")


def nope(x: Any, positions: Any = None) -> Any:
    """Return ``x`` (``[..., seq, dim]``) unchanged; ``positions`` are accepted and ignored.

    Without a causal mask, attention over NoPE queries and keys is permutation-equivariant;
    with one, order is still visible through the mask."""
    _INPUTS.check(array_api.namespace(x=x, positions=positions), x=x)  # positions: ignored
    return x
