"""``host_cache``: memoise host-side arithmetic (frequencies, limbs) for eager calls.

Eager decoding asks for the same frequencies on every token, so they are cached; under
torch.compile the function runs uncached, since dynamo warns about every lru_cache it traces
through and folds the results into constants once anyway.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from . import native

F = TypeVar("F", bound=Callable[..., Any])


def compiling() -> bool:
    """Whether a framework is tracing a compiled function (posenc.native.compiling)."""
    return native.compiling()


def host_cache(maxsize: int = 256) -> Callable[[F], F]:
    def decorate(fn: F) -> F:
        cached = functools.lru_cache(maxsize=maxsize)(fn)

        @functools.wraps(fn)
        def call(*args: Any) -> Any:
            if compiling():
                return fn(*args)
            return cached(*args)

        call.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
        return call  # type: ignore[return-value]

    return decorate
