"""posenc's own callables as the rows time them: the torch backend, its RotaryEmbedding module
(with or without a cos/sin table), and JAX-jitted rotaries (posenc's and the hand-written jnp
one, side by side, compiled once per run)."""

from __future__ import annotations

from typing import Any

from .rivals import jnp_rotary
from .rows import BenchContext, Missing
from .sizes import BASE


def pe_torch() -> Any:
    from posenc.backends import torch as pe

    return pe


def rotary_module(ctx: BenchContext, table: bool) -> Any:
    pe = pe_torch()
    if not hasattr(pe, "RotaryEmbedding"):
        raise Missing("posenc.backends.torch.RotaryEmbedding (the module API) is not in this build")
    s = ctx.sizes
    kwargs = {"max_positions": max(s.seqs)} if table else {}
    return ctx.memo(("module", table), lambda: pe.RotaryEmbedding(
        head_dim=s.head_dim, base=BASE, device=ctx.device, **kwargs))


def jax_fns(ctx: BenchContext) -> dict[str, Any]:
    """``jnp``: the hand-written rotary of q and k under jit; ``ours``: posenc's, with
    ``traces`` counting how often it traced."""
    def make() -> dict[str, Any]:
        import jax

        from posenc.backends import jax as pj

        traces: list[int] = []

        def ours(q: Any, k: Any, pos: Any) -> Any:
            traces.append(1)
            return pj.rope(q, pos, base=BASE), pj.rope(k, pos, base=BASE)

        return {"jnp": jax.jit(lambda q, k, pos: (jnp_rotary(q, pos, BASE),
                                                  jnp_rotary(k, pos, BASE))),
                "ours": jax.jit(ours), "traces": traces}

    return ctx.memo("jax-fns", make)
