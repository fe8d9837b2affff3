"""The public API is typed: the stubs are what `posenc stubs` generates, they agree with the
functions posenc serves at run time, and mypy reads a user's snippet against them."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import posenc
from posenc.backends import stubs
from posenc.encodings import public_functions

from ..conftest import ROOT

SNIPPET = '''\
import torch
import posenc
from posenc.backends import torch as pe
from posenc.conformance import check

reveal_type(posenc.rope)
reveal_type(pe.RotaryEmbedding)
reveal_type(pe.rope)
posenc.rope(torch.zeros(2, 4), bas=10.0)
check(posenc.rope, "rope", precison="exact")
pe.RotaryEmbedding(64, bse=1.0)
pe.T5RelativeBias(num_heads=8, max_distanc=64)
'''
# what mypy need not read to check the snippet (the test stays fast): their types become Any
SKIPPED = ("torch", "numpy", "jax", "jaxlib", "tensorflow", "keras", "flax", "hypothesis", "yaml",
           "jsonschema", "array_api_compat", "array_api_strict", "matplotlib", "transformers",
           "triton", "mpmath")


def _stub_functions(path: Path) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(path.read_text())
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


def _stub_parameters(node: ast.FunctionDef) -> list[tuple[str, str, object]]:
    """(name, kind, default) of each parameter; a default of ``...`` is unknown (None)."""
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    out = [(a.arg, "POSITIONAL_OR_KEYWORD", d) for a, d in zip(positional, defaults, strict=True)]
    out += [(a.arg, "KEYWORD_ONLY", d) for a, d in zip(args.kwonlyargs, args.kw_defaults,
                                                        strict=True)]
    return [(name, kind, _literal(default)) for name, kind, default in out]


def _literal(node: ast.expr | None) -> object:
    if node is None:
        return inspect.Parameter.empty
    value = ast.literal_eval(node)
    return None if value is Ellipsis else value


def _runtime_parameters(fn: object) -> list[tuple[str, str, object]]:
    return [(p.name, p.kind.name, p.default if p.default is not inspect.Parameter.empty else
             inspect.Parameter.empty) for p in inspect.signature(fn).parameters.values()]


def _agree(stub: list[tuple[str, str, object]], runtime: list[tuple[str, str, object]]) -> bool:
    return len(stub) == len(runtime) and all(
        s[:2] == r[:2] and ((s[2] is None and r[2] is not inspect.Parameter.empty) or s[2] == r[2])
        for s, r in zip(stub, runtime, strict=True))


def test_the_stubs_are_what_posenc_stubs_generates() -> None:
    pytest.importorskip("torch")  # the PyTorch stub lists its layer classes
    assert stubs.check(ROOT) == [], "the stubs are stale: run `posenc stubs`"


def test_the_package_ships_its_types() -> None:
    assert (ROOT / "posenc" / "py.typed").is_file()
    data = (ROOT / "pyproject.toml").read_text()
    assert '"py.typed", "*.pyi"' in data and '"posenc.backends.torch" = ["*.pyi"]' in data


def test_the_core_stub_declares_what_posenc_serves_with_its_signature() -> None:
    declared = _stub_functions(ROOT / "posenc" / "__init__.pyi")
    assert set(declared) == set(public_functions())
    assert "qk_permutation_indices" in declared
    for name, node in declared.items():
        assert _agree(_stub_parameters(node), _runtime_parameters(getattr(posenc, name))), name


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_a_backend_stub_declares_what_the_backend_module_serves(framework: str) -> None:
    pytest.importorskip(framework)
    module = importlib.import_module(f"posenc.backends.{framework}")
    path = ROOT / "backends" / stubs.FRAMEWORKS[framework]
    assert "from posenc.backends._served import *" in path.read_text()  # the functions are there
    declared = _stub_functions(ROOT / stubs.SERVED)
    assert set(declared) == set(public_functions())
    for name, node in declared.items():
        assert _agree(_stub_parameters(node), _runtime_parameters(getattr(module, name))), name
    classes = {node.name for node in ast.parse(path.read_text()).body
               if isinstance(node, ast.ClassDef)}
    if framework == "torch":  # every layer class but the hand-written RotaryEmbedding, re-exported
        from posenc.layers import all_layers

        assert classes | {"RotaryEmbedding"} == set(all_layers())
        assert all(isinstance(getattr(module, name), type) for name in all_layers())
        assert "from .rotary_embedding import RotaryEmbedding as RotaryEmbedding" in path.read_text()


def test_a_stub_that_drifts_from_the_runtime_is_caught() -> None:
    node = _stub_functions(ROOT / "posenc" / "__init__.pyi")["rope"]
    runtime = _runtime_parameters(posenc.rope)
    assert _agree(_stub_parameters(node), runtime)
    renamed = [("bas" if p[0] == "base" else p[0], *p[1:]) for p in runtime]
    assert not _agree(_stub_parameters(node), renamed)
    moved = [(*p[:2], 1.0 if p[0] == "base" else p[2]) for p in runtime]
    assert not _agree(_stub_parameters(node), moved)


def test_mypy_sees_real_signatures_in_a_users_snippet(tmp_path: Path) -> None:
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (it is in the test extra)")
    pytest.importorskip("mkdocs")  # the hook that lays the package out imports it
    hooks = importlib.util.spec_from_file_location("repo_links", ROOT / "docs_hooks" / "repo_links.py")
    assert hooks is not None and hooks.loader is not None
    module = importlib.util.module_from_spec(hooks)
    hooks.loader.exec_module(module)
    site = module.installed_layout(ROOT, tmp_path / "site")  # as a wheel installs it
    (tmp_path / "snippet.py").write_text(SNIPPET)
    (tmp_path / "mypy.ini").write_text(
        f"[mypy]\nmypy_path = {site}\nfollow_imports = silent\n"
        f"[mypy-{','.join(f'{m}.*' for m in SKIPPED)}]\nfollow_imports = skip\n")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "mypy.ini",
                           "--cache-dir", str(tmp_path / "cache"), "snippet.py"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    out = proc.stdout + proc.stderr
    assert 'Revealed type is "def (x: Any, positions: Any =, *, base: float =, layout: str =' in out
    assert "def (head_dim: int | None =, *, base: float =" in out
    assert "seq_len: int | None =, device: Any =) -> Any" in out  # pe.rope, through _served.pyi
    for wrong, meant, where in [("bas", "base", "rope"), ("precison", "precision", "check"),
                                ("bse", "base", "RotaryEmbedding"),
                                ("max_distanc", "max_distance", "T5RelativeBias")]:
        assert f'Unexpected keyword argument "{wrong}" for "{where}"; did you mean "{meant}"?' \
            in out, out
    assert "Found 4 errors in 1 file" in out, out


def test_posenc_stubs_check_fails_on_a_stale_stub(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    from posenc.cli import main

    for path in stubs.stubs():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text((ROOT / path).read_text())
    assert main(["stubs", "--check", "--root", str(tmp_path)]) == 0
    core = tmp_path / "posenc" / "__init__.pyi"
    core.write_text(core.read_text().replace("base: float = 10000.0", "base: float = 1.0", 1))
    assert main(["stubs", "--check", "--root", str(tmp_path)]) == 1
    assert f"{core}: stale" in capsys.readouterr().out
    assert main(["stubs", "--root", str(tmp_path)]) == 0
    assert core.read_text() == (ROOT / "posenc" / "__init__.pyi").read_text()
