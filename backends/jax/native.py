"""JAX's special cases for the core (``posenc.native`` plugins ``jax`` and ``jaxlib``)."""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp

from posenc import native, rotary


class JaxNative(native.Native):
    library = "jax"
    aliases = ("jaxlib",)  # where jax.Array's implementation type lives

    def array_types(self) -> tuple[type, ...]:
        return (jax.Array, jax.core.Tracer)

    def namespace(self) -> ModuleType:
        return jnp

    def is_traced(self, x: Any) -> bool:
        return isinstance(x, jax.core.Tracer)

    def rounded_to_float32(self, x: Any) -> Any:
        # XLA on GPU may drop a float64 -> float32 -> float64 round trip (excess precision is
        # allowed by default); reduce_precision is the rounding it keeps
        return jax.lax.reduce_precision(x, exponent_bits=8, mantissa_bits=23).astype(jnp.float32)

    # Eager calls: the phases (about thirty primitives) and the rotation (about ten) run as one
    # compiled call each, one dispatch instead of one per primitive; the frequencies are an
    # argument, so one compilation per shape serves every schedule. Traced calls (the user's
    # jax.jit) get None: the array-API code inlines into their graph.
    def rotary_phases(self, positions: Any, inv_freq: tuple[float, ...], compute: Any,
                      device: Any) -> Any | None:
        if isinstance(positions, jax.core.Tracer):
            return None
        return _limb_phases(positions, _limbs(inv_freq, jnp.dtype(compute).name, device))

    def rotate(self, head: Any, cos: Any, sin: Any, layout: str) -> Any | None:
        if isinstance(head, jax.core.Tracer) or isinstance(cos, jax.core.Tracer):
            return None
        return _rotate(head, cos, sin, layout=layout)


@functools.lru_cache(maxsize=64)
def _limbs(inv_freq: tuple[float, ...], compute: str, device: Any) -> Any:
    with jax.ensure_compile_time_eval():  # a concrete array even when first made under a trace
        return jax.device_put(jnp.asarray(rotary.turn_limbs(inv_freq), dtype=compute), device)


@jax.jit
def _limb_phases(positions: Any, limbs: Any) -> Any:
    return rotary.limb_phases(jnp, positions, limbs)


@functools.partial(jax.jit, static_argnames="layout")
def _rotate(head: Any, cos: Any, sin: Any, layout: str) -> Any:
    return rotary.rotate(jnp, head, cos, sin, layout)


NATIVE = native.register(JaxNative())
