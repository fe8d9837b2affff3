"""JAX's special cases for the core (``posenc.native`` plugins ``jax`` and ``jaxlib``)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp

from posenc import native


class JaxNative(native.Native):
    library = "jax"
    aliases = ("jaxlib",)  # where jax.Array's implementation type lives

    def array_types(self) -> tuple[type, ...]:
        return (jax.Array, jax.core.Tracer)

    def namespace(self) -> ModuleType:
        return jnp

    def is_traced(self, x: Any) -> bool:
        return isinstance(x, jax.core.Tracer)


NATIVE = native.register(JaxNative())
