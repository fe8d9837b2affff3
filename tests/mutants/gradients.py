"""Backends whose values are right and whose gradients are wrong: only the gradient check can
catch them."""

from __future__ import annotations

import dataclasses
from typing import Any

from posenc.backends import get_backend
from posenc.backends.backend import Backend
from posenc.encodings import public_functions

_IMPL = public_functions()


def _detached_rope(x: Any, positions: Any = None, **kw: Any) -> Any:
    """A rotation computed outside autograd (e.g. a kernel without a backward)."""
    return _IMPL["rope"](x.detach(), positions, **kw)


def _learned_flipped_backward(positions: Any, table: Any, **kw: Any) -> Any:
    """A hand-written backward with the wrong sign."""
    import torch

    class Lookup(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, table: Any) -> Any:
            ctx.save_for_backward(table)
            return _IMPL["learned"](positions, table, **kw)

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            (table,) = ctx.saved_tensors
            with torch.enable_grad():
                leaf = table.detach().requires_grad_(True)
                out = _IMPL["learned"](positions, leaf, **kw)
                (g,) = torch.autograd.grad(out, leaf, grad)
            return -g

    return Lookup.apply(table)


def _mutant(name: str, **overrides: Any) -> Backend:
    return dataclasses.replace(get_backend("torch"), name=name, overrides=overrides)


DETACHED_ROPE = _mutant("torch-detached-rope", rope=_detached_rope)
FLIPPED_BACKWARD = _mutant("torch-flipped-backward", learned=_learned_flipped_backward)
