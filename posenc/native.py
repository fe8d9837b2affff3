"""The one place where a framework's fast paths reach the core.

The core is written once against the array API. Where a framework does better natively (a
fused rotation, float64 phases on the device, an asynchronous range check) or needs a special
case (how to tell that it is tracing, its array namespace), the core asks the :class:`Native`
of the framework an array belongs to. The base class answers with the generic behaviour (or
None: "no native path, use the array-API code"); frameworks subclass it in
``posenc.backends`` and register an instance.

Registration is a plugin: each ``posenc.native`` entry point names a library (the top-level
package of its array types) and a ``Native`` instance; the core never names a framework, and
third-party array libraries register the same way. A plugin is loaded when posenc's functions
are first looked up (``from posenc import rope``) if its library is imported by then, else the
first time an array of the library is seen, or when its ``posenc.backends`` module is used.
(Loading cannot happen while torch.compile traces: a process whose first posenc call is
traced with ``fullgraph=True``, and which imported torch only after looking up posenc's
functions, must make one eager call or import ``posenc.backends.torch`` first.)
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any, ClassVar

ENTRY_POINT_GROUP = "posenc.native"


class Native:
    """A framework's special cases; every method's default is the generic behaviour."""

    library: ClassVar[str] = ""
    # also its libraries under other top-level names (e.g. where its array types live)
    aliases: ClassVar[tuple[str, ...]] = ()

    def array_types(self) -> tuple[type, ...]:
        """The array types of the library (subclasses included), matched with isinstance:
        ``type(x).__module__`` cannot be read under every tracer."""
        return ()

    def namespace(self) -> ModuleType | None:
        """The library's array-API namespace (None: the arrays' ``__array_namespace__``)."""
        return None

    def device_of(self, x: Any) -> Any:
        """The device of ``x``, or None where it cannot be told (e.g. a tracer)."""
        try:
            import array_api_compat

            return array_api_compat.device(x)
        except Exception:  # tracers and libraries without a device notion
            return None

    def is_traced(self, x: Any) -> bool:
        """Whether ``x``'s values cannot be read now (inside a jit, a compile or a graph)."""
        return False

    def compiling(self) -> bool:
        """Whether the library is tracing a compiled function right now."""
        return False

    def assert_position_range(self, positions: Any, *, compute: Any, name: str,
                              low: int | None, high: int | None) -> bool:
        """Check the positions as posenc.array_api.check_position_range does, without reading
        them back to the host (an error may come later, from the device), and return True; or
        return False to let the core check on the host."""
        return False

    def rounded_to_float32(self, x: Any) -> Any | None:
        """float64 ``x`` rounded to float32 in a way the library's compiler keeps (None: a
        plain cast is kept)."""
        return None

    def position_extrema(self, positions: Any, floating: bool) -> Any | None:
        """posenc.array_api.position_extrema computed the library's fastest way, or None to
        let the core compute it with array-API calls."""
        return None

    def rotary_phases(self, positions: Any, inv_freq: tuple[float, ...], compute: Any,
                      device: Any) -> Any | None:
        """Angles ``positions * inv_freq`` reduced to ``[-pi, pi]`` to float32 accuracy, or None
        for the core's exact float32 limbs (posenc.rotary)."""
        return None

    def rotary_limbs(self, inv_freq: tuple[float, ...], compute: Any, device: Any) -> Any | None:
        """posenc.rotary.turn_limbs(inv_freq) as a ``[3, n]`` array on the device, cached across
        calls where that is safe, or None to build it per call."""
        return None

    def rotate(self, head: Any, cos: Any, sin: Any, layout: str) -> Any | None:
        """``head`` with its pairs rotated (see posenc.rotary.rotate), or None."""
        return None

    def toeplitz(self, rows: Any, q_len: int, k_len: int) -> Any | None:
        """``out[h, i, j] = rows[h, j − i + q_len − 1]``, contiguous, or None."""
        return None

    def constant_result(self, fn: Callable[..., Any]) -> Callable[..., Any] | None:
        """``fn`` wrapped so that the library's tracer treats its result as a constant, or
        None where it needs no wrapping."""
        return None


GENERIC = Native()

_BY_LIBRARY: dict[str, Native] = {}
# (type, native) pairs in registration order; a plain list: dynamo traces isinstance over it
_TYPES: list[tuple[type, Native]] = []
_PLUGINS: dict[str, Any] | None = None
_ATTEMPTED: set[str] = set()


def register(native: Native) -> Native:
    """Make ``native`` the fast paths of its library (the last registration wins)."""
    for name in (native.library, *native.aliases):
        _BY_LIBRARY[name] = native
        _ATTEMPTED.add(name)
    _TYPES[:] = [(t, n) for t, n in _TYPES if n.library != native.library]
    _TYPES.extend((t, native) for t in native.array_types())
    return native


def registered() -> tuple[Native, ...]:
    return tuple({id(n): n for n in _BY_LIBRARY.values()}.values())


def _plugins() -> dict[str, Any]:
    global _PLUGINS
    if _PLUGINS is None:
        from importlib.metadata import entry_points

        _PLUGINS = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return _PLUGINS


def for_library(library: str) -> Native:
    """The native of ``library`` (a top-level package name), loading its plugin on first use;
    :data:`GENERIC` when none is installed."""
    native = _BY_LIBRARY.get(library)
    if native is not None:
        return native
    if library not in _ATTEMPTED:
        _ATTEMPTED.add(library)
        plugin = _plugins().get(library)
        if plugin is not None:
            loaded = plugin.load()
            if not isinstance(loaded, Native):
                raise TypeError(f"entry point {ENTRY_POINT_GROUP}:{library} = {plugin.value} "
                                f"is a {type(loaded).__name__}, not a posenc.native.Native")
            if loaded.library not in _BY_LIBRARY:
                register(loaded)
            return _BY_LIBRARY.get(library, loaded)
    return GENERIC


def library_of(array: Any) -> str:
    """The library of ``array``: its registered library, else the top-level package that
    defines ``type(array)`` ('numpy', 'array_api_strict', ...)."""
    for array_type, native in _TYPES:
        if isinstance(array, array_type):
            return native.library
    top = array.__class__.__module__.split(".")[0]  # type(array).__module__: dynamo cannot
    native = for_library(top)
    return top if native is GENERIC else native.library


def of(array: Any) -> Native:
    """The native of the library ``array`` belongs to."""
    for array_type, native in _TYPES:
        if isinstance(array, array_type):
            return native
    return for_library(library_of(array))


def compiling() -> bool:
    """Whether any loaded library is tracing a compiled function right now."""
    for native in _BY_LIBRARY.values():
        if native.compiling():
            return True
    return False


def constant_result(fn: Callable[..., Any]) -> Callable[..., Any] | None:
    """``fn`` wrapped for the first loaded library that needs it (see Native.constant_result)."""
    for native in _BY_LIBRARY.values():
        wrapped = native.constant_result(fn)
        if wrapped is not None:
            return wrapped
    return None


def load_imported() -> None:
    """Load the plugins of every library that is imported already."""
    for library in _plugins():
        if library not in _ATTEMPTED and sys.modules.get(library) is not None:
            try:
                for_library(library)
            except ImportError:  # a broken install of it: its first array will say so
                _ATTEMPTED.discard(library)
