"""posenc.native, the one delegation point between the core and a framework's fast paths:
plugins load when their library's arrays appear, the generic path stays the fallback, and a
third-party library can register its own paths without touching the core."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
import pytest

import posenc
from posenc import native

from ..conftest import run_python


def test_numpy_arrays_take_the_generic_paths() -> None:
    assert native.library_of(np.zeros(3)) == "numpy"
    assert native.of(np.zeros(3)) is native.GENERIC
    assert native.GENERIC.rotate(np.zeros((2, 4)), None, None, "half") is None


def test_the_torch_plugin_loads_for_the_first_tensor_and_owns_its_paths() -> None:
    code = (
        "import sys, torch\n"
        "from posenc import native\n"
        "assert 'posenc.backends.torch.native' not in sys.modules\n"
        "x = torch.nn.Parameter(torch.ones(2, 4))\n"
        "assert native.library_of(x) == 'torch'\n"
        "assert type(native.of(x)).__name__ == 'TorchNative'\n"
        "assert 'posenc.backends.torch.native' in sys.modules\n"
        "print('ok')\n")
    proc = run_python(code)
    assert proc.stdout.strip() == "ok", proc.stderr


def test_a_first_call_traced_with_fullgraph_finds_the_plugin_loaded() -> None:
    """torch imported before posenc's functions are looked up: the plugin loads at the look-up,
    outside the tracer, so even the first call can be traced with fullgraph=True (a Parameter:
    dynamo cannot read type(x).__module__ of it)."""
    code = (
        "import torch\n"
        "from posenc import rope\n"
        "f = torch.compile(lambda x: rope(x), fullgraph=True, backend='eager')\n"
        "x = torch.nn.Parameter(torch.randn(2, 3, 8))\n"
        "torch.testing.assert_close(f(x), rope(x))\n"
        "print('ok')\n")
    proc = run_python(code)
    assert proc.stdout.strip() == "ok", proc.stderr[-2000:]


class _Wrapped:
    """A toy array library: a NumPy array in a box (its 'framework' is this test module)."""

    def __init__(self, value: np.ndarray) -> None:
        self.value = value


class _CountingNative(native.Native):
    library = "tests"

    def __init__(self) -> None:
        self.rotations = 0

    def array_types(self) -> tuple[type, ...]:
        return (_Wrapped,)

    def namespace(self) -> ModuleType:
        import array_api_compat.numpy as xp

        return xp

    def rotate(self, head: Any, cos: Any, sin: Any, layout: str) -> Any:
        self.rotations += 1
        return None  # counted, then the generic rotation


def test_a_registered_native_is_asked_by_the_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "_BY_LIBRARY", dict(native._BY_LIBRARY))
    monkeypatch.setattr(native, "_TYPES", list(native._TYPES))
    counting = native.register(_CountingNative())
    assert native.library_of(_Wrapped(np.zeros(2))) == "tests"
    assert native.of(_Wrapped(np.zeros(2))) is counting
    # the core's rotary asks the native of the array it rotates
    monkeypatch.setattr(native, "of", lambda x: counting)
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    out = posenc.rope(x)
    assert counting.rotations == 1
    monkeypatch.undo()
    np.testing.assert_array_equal(out, posenc.rope(x))


def test_a_plugin_that_is_not_a_native_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    class EntryPoint:
        value = "somewhere:THING"

        def load(self) -> object:
            return object()

    monkeypatch.setattr(native, "_PLUGINS", {"fakelib": EntryPoint()})
    monkeypatch.setattr(native, "_ATTEMPTED", set())
    with pytest.raises(TypeError, match=r"posenc\.native:fakelib = somewhere:THING"):
        native.for_library("fakelib")
