"""The Backend object: what the harness and the convenience modules need from an array library."""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from posenc.errors import BackendError, MissingFrameworkError

FLOAT_DTYPES = ("float64", "float32", "bfloat16", "float16")
# framework settings a user may ask a check to run under (Options.settings, --matmul-precision)
SETTINGS = {"matmul_precision": ("high", "highest")}


@contextlib.contextmanager
def _untouched(asked: Mapping[str, str]) -> Iterator[str | None]:
    yield f"{', '.join(sorted(asked))}: no such setting here" if asked else None


@dataclass
class Backend:
    """An array library as posenc sees it.

    ``load`` imports the framework and returns its array-API namespace. ``to_numpy`` and
    ``from_numpy`` convert (``from_numpy(array, dtype_name, device)``). ``compile`` wraps a
    function of arrays for the compiled mode (None: the backend has none). ``overrides`` replace
    individual encodings by name (a fused kernel is a backend overriding ``rope``); the
    harness checks only what a backend with overrides provides, unless ``own_code`` says the
    rest is the backend's too (a framework backend plus one kernel). ``scope(function,
    params)`` returns why arguments are outside what the backend implements (None: in scope):
    such checks report ``unsupported``, as when the implementation raises ``posenc.Unsupported``
    or ``NotImplementedError``. An implementation that computes in float32 by design leaves
    float64 out of ``dtypes`` (its float64 checks then report unsupported).
    ``force_namespace`` runs the implementations with this namespace even though the arrays
    look like another library's (module backends wrapping NumPy). ``session`` is entered once
    around a harness run (caches and logging only: no numerical flag). ``settings(dtype, own,
    asked)`` is entered around each check of ``dtype`` and sets the framework flags it runs
    under: JAX's 64-bit mode for float64 checks only; for posenc's own code (``own``) the
    flags posenc's implementations are written for; the ``asked`` ones (``SETTINGS``) where
    the user names them; the caller's flags otherwise. It yields one line saying which
    settings were in force (None: the framework's, untouched).
    """

    name: str
    load: Callable[[], ModuleType]
    to_numpy: Callable[[Any], np.ndarray]
    from_numpy: Callable[[np.ndarray, str, Any], Any]
    dtypes: tuple[str, ...] = ("float64", "float32")
    index_dtype: str = "int64"
    devices: Callable[[], list[str]] = field(default=lambda: ["cpu"])
    # what a function's device= receives for a device name ("cuda" -> the framework's object)
    device_object: Callable[[str], Any] = field(default=lambda name: name)
    compile: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None
    overrides: dict[str, Callable[..., Any]] = field(default_factory=dict)
    own_code: bool = False  # the encodings not overridden are the backend's own code too
    scope: Callable[[str, dict[str, Any]], str | None] | None = None
    # function -> how its golden cases are compared where the spec allows another contract
    # ("softmax_equivalent": equal up to a constant per query row; conformance/comparisons.py)
    comparisons: dict[str, str] = field(default_factory=dict)
    force_namespace: bool = False
    session: Callable[[], contextlib.AbstractContextManager[Any]] = field(
        default=contextlib.nullcontext)
    settings: Callable[[str, bool, Mapping[str, str]],
                       contextlib.AbstractContextManager[str | None]] = field(
        default=lambda dtype, own, asked: _untouched(asked))
    requires: str | None = None  # top-level module that must be importable
    extra: str | None = None  # pip extra that installs it
    # Known gaps shipped with the backend: check-id glob -> reason; failures matching one
    # report as xfail, passes as xpass. The CLI's --expectations file adds to (and overrides) it.
    expectations: dict[str, str] = field(default_factory=dict)
    # Layer backends check the encodings through a framework's layer API: ``bind(function,
    # names, params, compiled)`` returns the callable of the arrays ``names`` that the harness
    # checks (it builds the layer with ``params`` and the weight arrays, and compiles the
    # layer when ``compiled``). ``functions`` lists what it covers; others are unsupported.
    # ``vjp(fn, arrays, wrt, cotangent)``: gradients of ``sum(cotangent * fn(*arrays))`` with
    # respect to ``arrays[i]`` for ``i in wrt`` (tuple results stacked); None: no autodiff
    vjp: Callable[[Callable[..., Any], list[Any], list[int], Any], list[Any]] | None = None
    bind: Callable[[str, tuple[str, ...], dict[str, Any], bool], Callable[..., Any]] | None = None
    functions: frozenset[str] | None = None
    _namespace: ModuleType | None = field(default=None, init=False, repr=False, compare=False)

    def available(self) -> bool:
        """Whether the framework is installed (checked without importing it)."""
        return self.requires is None or importlib.util.find_spec(self.requires) is not None

    def namespace(self) -> ModuleType:
        """The array-API namespace, imported on first use (then cached)."""
        if self._namespace is not None:
            return self._namespace
        if not self.available():
            raise MissingFrameworkError(self.requires or self.name, self.extra or self.name)
        try:
            self._namespace = self.load()
        except ImportError as exc:
            if self.requires is None:
                raise
            raise MissingFrameworkError(self.requires, self.extra or self.name) from exc
        return self._namespace

    def function(self, name: str) -> Callable[..., Any]:
        """The callable for encoding function ``name``: an override, or the shared implementation."""
        if name in self.overrides:
            return self.overrides[name]
        from posenc.encodings import public_functions

        functions = public_functions()
        if name not in functions:
            raise BackendError(f"no encoding function named {name!r}")
        impl = functions[name]
        if not self.force_namespace:
            return impl
        xp = self.namespace()
        from posenc.array_api import use_namespace

        def in_namespace(*args: Any, **kwargs: Any) -> Any:
            with use_namespace(xp):
                return impl(*args, **kwargs)

        return in_namespace

    def dtype(self, name: str) -> Any:
        """The backend's dtype object for a name such as 'float32'."""
        xp = self.namespace()
        try:
            return getattr(xp, name)
        except AttributeError:
            raise BackendError(f"backend {self.name!r} has no dtype {name!r}") from None

    def held_as(self, name: str, device: str = "cpu") -> str:
        """The dtype an array of dtype ``name`` gets under the settings in force (JAX without
        64-bit mode holds int64 as int32)."""
        from posenc import array_api

        return array_api.dtype_name(self.from_numpy(np.zeros(0, name), name, device).dtype)


def numpy_from_dlpack(x: Any) -> np.ndarray:
    """Copy any array to NumPy float64/int64 (via DLPack or ``__array__``)."""
    try:
        out = np.from_dlpack(x)
    except (TypeError, AttributeError, BufferError, RuntimeError):
        out = np.asarray(x)
    return np.array(out, copy=True)


def namespace_backend(name: str, xp: ModuleType) -> Backend:
    """A backend for any module that is an array-API namespace (like ARRAY_API_TESTS_MODULE)."""

    def from_numpy(array: np.ndarray, dtype: str, device: Any) -> Any:
        return xp.asarray(array, dtype=getattr(xp, dtype))

    dtypes = tuple(d for d in FLOAT_DTYPES if hasattr(xp, d))
    return Backend(name=name, load=lambda: xp, to_numpy=numpy_from_dlpack, from_numpy=from_numpy,
                   dtypes=dtypes, force_namespace=True)
