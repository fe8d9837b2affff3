"""Backend discovery, lazy framework imports, per-backend convenience modules."""

from __future__ import annotations

import importlib
import sys
import types
from importlib.metadata import entry_points

import numpy as np
import pytest

from posenc.backends import BUILTIN, get_backend, installed_backends
from posenc.backends.backend import Backend
from posenc.errors import BackendError, MissingFrameworkError

from ..conftest import run_python

FRAMEWORKS = ("torch", "jax", "tensorflow")


def test_import_posenc_imports_no_framework() -> None:
    code = (
        "import sys, numpy as np, posenc, posenc.backends, posenc.conformance\n"
        "from posenc.backends import torch, jax, tensorflow\n"
        "posenc.rope(np.zeros((3, 4))); posenc.sinusoidal(np.arange(3), 8)\n"
        "posenc.backends.installed_backends()\n"
        f"loaded = sorted(m for m in sys.modules if m.split('.')[0] in {FRAMEWORKS!r})\n"
        "assert not loaded, loaded\n"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr


def test_missing_framework_names_the_pip_extra() -> None:
    fake = Backend(name="fake", load=lambda: None, to_numpy=np.asarray,
                   from_numpy=lambda a, d, v: a, requires="posenc_no_such_framework", extra="fake")
    assert not fake.available()
    with pytest.raises(MissingFrameworkError, match=r"pip install 'posenc\[fake\]'"):
        fake.namespace()


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_blocked_framework_gives_helpful_message(framework: str) -> None:
    code = (
        f"import sys; sys.modules[{framework!r}] = None\n"
        f"from posenc.backends import {framework} as pe\n"
        "from posenc.errors import MissingFrameworkError\n"
        "try:\n"
        "    pe.rope([[0.0, 1.0]])\n"
        "except MissingFrameworkError as exc:\n"
        "    print(exc)\n"
    )
    proc = run_python(code)
    assert f"pip install 'posenc[{framework}]'" in proc.stdout, proc.stdout + proc.stderr


def test_builtin_backends_are_registered_entry_points() -> None:
    registered = {ep.name for ep in entry_points(group="posenc.backends")}
    assert set(BUILTIN) <= registered
    assert "numpy" in installed_backends()


def test_backend_resolution() -> None:
    assert get_backend("numpy").name == "numpy"
    assert get_backend("posenc.backends.numpy:BACKEND") is get_backend("numpy")
    pytest.importorskip("array_api_strict")
    module_backend = get_backend("array_api_strict")
    assert module_backend.force_namespace and module_backend.dtypes == ("float64", "float32")
    for bad, message in [("posenc_no_such_module", "cannot import backend"),
                         ("json", "neither a posenc Backend nor an array-API namespace"),
                         ("posenc.backends.numpy:NOPE", "has no 'NOPE'")]:
        with pytest.raises(BackendError, match=message):
            get_backend(bad)


def test_a_library_that_is_no_namespace_is_pointed_to_its_array_api_compat_namespace(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """dask.array (like cupy) is not an array-API namespace itself: the refusal names the
    array_api_compat namespace to pass instead, and that advice, followed, resolves."""
    dask = types.ModuleType("dask")
    dask.array = types.ModuleType("dask.array")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "dask", dask)
    monkeypatch.setitem(sys.modules, "dask.array", dask.array)
    with pytest.raises(BackendError, match=r"neither .* --backend array_api_compat\.dask\.array$"):
        get_backend("dask.array")
    with pytest.raises(BackendError, match=r"array_api_compat\.<library>\), or write a posenc "
                                           r"Backend .*docs/backends\.md"):
        get_backend("json")
    assert get_backend("array_api_compat.numpy").namespace().__name__ == "array_api_compat.numpy"


def test_a_library_not_installed_or_a_misspelled_name_gets_the_next_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # an import of it fails, installed or not
    with pytest.raises(BackendError, match=r"install cupy, then .* --backend array_api_compat\.cupy"):
        get_backend("cupy")
    with pytest.raises(BackendError, match=r"did you mean 'torch'\?"):
        get_backend("pytorch")
    with pytest.raises(BackendError, match=r"no peer adapter 'peer:transfomers'; did you mean "
                                           r"'peer:transformers'\? \(peers: .*peer:litgpt"):
        get_backend("peer:transfomers")
    with pytest.raises(BackendError, match=r"has no 'BACKND'; did you mean 'BACKEND'\?"):
        get_backend("posenc.backends.numpy:BACKND")


@pytest.mark.parametrize("name", BUILTIN)
def test_convenience_module_returns_native_arrays(name: str) -> None:
    backend = get_backend(name)
    if not backend.available():
        pytest.skip(f"{name} is not installed")
    pe = importlib.import_module(f"posenc.backends.{name}")
    xp = backend.namespace()
    x = backend.from_numpy(np.ones((2, 3, 8)), "float32", None)
    out = pe.rope(x, positions=[0, 1, 2], layout="interleaved")
    assert type(out) is type(x) and out.dtype == xp.float32 and tuple(out.shape) == (2, 3, 8)
    table = pe.sinusoidal([0, 1, 2], 6, dtype="float32")
    assert type(table) is type(x) and tuple(table.shape) == (3, 6)
    rows = pe.learned([1, 0], np.arange(8.0).reshape(4, 2))
    np.testing.assert_array_equal(backend.to_numpy(rows), [[2.0, 3.0], [0.0, 1.0]])
    assert "rope" in dir(pe)


def test_jax_x64_is_never_flipped_by_the_library() -> None:
    pytest.importorskip("jax")
    code = (
        "import jax, numpy as np\n"
        "from posenc.backends import jax as pe\n"
        "pe.rope(np.zeros((2, 4))); pe.sinusoidal([0, 1], 4, dtype='float64')\n"
        "from posenc.conformance import Options, run\n"
        "results = run(Options(backends=['jax'], encodings=['learned'], dtypes=['float64'],\n"
        "                      modes=['eager'], max_examples=2))\n"
        "assert results and all(r.status == 'pass' for r in results), results\n"
        "assert not jax.config.jax_enable_x64\n"
        "print('ok')\n"
    )
    proc = run_python(code)
    assert proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_torch_compile_fullgraph_on_user_code() -> None:
    """A user's torch.compile(fullgraph=True) around posenc calls must not graph-break."""
    torch = pytest.importorskip("torch")
    import posenc

    @torch.compile(fullgraph=True, backend="eager")
    def step(q, positions, table, ids):
        return posenc.rope(q, positions, layout="interleaved", rotary_dim=4), posenc.learned(
            ids, table), posenc.sinusoidal(ids, 6, dtype=torch.float32)

    q = torch.randn(2, 3, 8)
    out = step(q, torch.tensor([[0, 1, 2], [5, 6, 7]]), torch.randn(5, 2), torch.tensor([0, 4]))
    assert out[0].shape == q.shape and torch.isnan(out[1]).sum() == 0
