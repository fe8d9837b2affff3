"""The homes import one way: core <- backends <- conformance, with cli/docs/plot/bench on top.

Read from the source (every import statement, function-level ones included), so a violation
fails here before it reaches a user as an import cycle or a framework imported by ``import
posenc``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FRAMEWORKS = {"torch", "jax", "jaxlib", "tensorflow", "keras", "triton", "flax"}
APPLICATION = {"cli", "docs", "__main__"}
HOMES = {"posenc": "core", "backends": "backends", "conformance": "conformance"}
MAY_IMPORT = {"core": {"core"}, "backends": {"core", "backends"},
              "conformance": {"core", "backends", "conformance"}}


def _home_of_file(path: Path) -> str | None:
    rel = path.relative_to(ROOT)
    home = HOMES.get(rel.parts[0])
    if home == "core" and ((rel.stem in APPLICATION and len(rel.parts) == 2)
                           or rel.parts[1] == "plot"):
        return None  # the application layer may import anything
    return home


def _home_of_module(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] != "posenc":
        return None
    if len(parts) > 1 and parts[1] in ("backends", "conformance"):
        return parts[1]
    if len(parts) > 1 and parts[1] in ("bench", *APPLICATION, "plot"):
        return "application"
    return "core"


def _package_of(path: Path) -> list[str]:
    rel = path.relative_to(ROOT).with_suffix("")
    home = {"backends": ["posenc", "backends"], "conformance": ["posenc", "conformance"]}
    parts = home.get(rel.parts[0], ["posenc"]) + list(rel.parts[1:])
    return parts if path.name == "__init__.py" else parts[:-1]


def _imports(path: Path, source: str) -> list[tuple[int, str, list[str]]]:
    """``(line, module, names)`` of every import in ``source`` (the text of ``path``), relative
    ones resolved."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                package = _package_of(path)
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, module] if module else base)
            found.append((node.lineno, module, [alias.name for alias in node.names]))
    return found


def _sources() -> list[Path]:
    return sorted(p for folder in HOMES for p in (ROOT / folder).rglob("*.py"))


def _violations(path: Path, source: str | None = None) -> list[str]:
    home = _home_of_file(path)
    if home is None:
        return []
    out = []
    for line, module, names in _imports(path, path.read_text() if source is None else source):
        where = f"{path.relative_to(ROOT)}:{line}"
        if home == "core" and module.split(".")[0] in FRAMEWORKS:
            out.append(f"{where}: the core imports the framework {module}")
        target = _home_of_module(module)
        if target is None:
            continue
        if target not in MAY_IMPORT[home]:
            out.append(f"{where}: {home} imports {module} ({target})")
        if target != home:
            private = [n for n in [*module.split("."), *names]
                       if n.startswith("_") and not n.startswith("__")]
            if private:
                out.append(f"{where}: imports private {', '.join(private)} from {module}")
    return out


def test_the_homes_import_one_way() -> None:
    violations = [v for path in _sources() for v in _violations(path)]
    assert violations == [], "\n".join(violations)


def test_the_core_looks_up_no_framework_in_sys_modules() -> None:
    found = []
    for path in _sources():
        if _home_of_file(path) != "core":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in FRAMEWORKS:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert found == [], "the core names a framework:\n" + "\n".join(found)


@pytest.mark.parametrize(("broken", "named"), [
    ("import torch\n", "the core imports the framework torch"),
    ("from posenc.backends import torch\n", "core imports posenc.backends"),
    ("from ..conformance import runner\n", "core imports posenc.conformance"),
    ("from posenc.backends.torch.native import _limbs\n", "imports private _limbs"),
])
def test_the_check_names_a_planted_violation(broken: str, named: str) -> None:
    planted = ROOT / "posenc" / "encodings" / "planted.py"
    assert any(named in v for v in _violations(planted, broken)), _violations(planted, broken)
