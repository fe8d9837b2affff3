"""The house rules of the four shipped homes (``posenc/``, ``backends/``, ``conformance/``,
``bench/``): no function over 80 lines, no module over 500, and at most 25 modules at
``conformance/``'s root (the rest live in sub-packages with one job each). Read from the
source, so a long function fails here, named with its place, before review."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOMES = ("posenc", "backends", "conformance", "bench")
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 500
MAX_CONFORMANCE_ROOT_MODULES = 25  # every *.py at the root, __init__ and test_conformance too


def _sources() -> list[Path]:
    return sorted(p for home in HOMES for p in (ROOT / home).rglob("*.py"))


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int, int]]:
    """``(name, first line, lines)`` of every function (methods and nested ones included)
    whose ``def`` through its last line spans more than ``limit`` lines."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = node.end_lineno - node.lineno + 1
            if lines > limit:
                found.append((node.name, node.lineno, lines))
    return found


def test_no_function_is_over_80_lines() -> None:
    found = [f"{path.relative_to(ROOT)}:{line} {name}: {lines} lines"
             for path in _sources() for name, line, lines in long_functions(path.read_text())]
    assert found == [], (f"functions over {MAX_FUNCTION_LINES} lines (split them by job):\n"
                         + "\n".join(found))


def test_no_module_is_over_500_lines() -> None:
    found = [f"{path.relative_to(ROOT)}: {n} lines" for path in _sources()
             if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES]
    assert found == [], (f"modules over {MAX_MODULE_LINES} lines (split them by job):\n"
                         + "\n".join(found))


def test_conformance_root_holds_at_most_25_modules() -> None:
    root = sorted(p.name for p in (ROOT / "conformance").glob("*.py"))
    assert len(root) <= MAX_CONFORMANCE_ROOT_MODULES, (
        f"{len(root)} modules at conformance/'s root (at most {MAX_CONFORMANCE_ROOT_MODULES}): "
        "move a cohesive group into a sub-package\n" + "\n".join(root))


def test_every_shipped_home_is_covered() -> None:
    """Each folder pyproject ships as a top-level part of ``posenc`` is under the rules."""
    import tomllib

    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    shipped_code = {path.split("/")[0] for name, path in dirs.items() if name.count(".") == 1
                    and any((ROOT / path).glob("*.py"))}
    assert shipped_code <= set(HOMES), sorted(shipped_code - set(HOMES))


@pytest.mark.parametrize(("body", "found"), [(80, []), (81, [("planted", 1, 81)])])
def test_the_check_counts_def_through_last_line(body: int, found: list) -> None:
    planted = "def planted():\n" + "    x = 1\n" * (body - 2) + "    return x\n"
    assert long_functions(planted) == found
    nested = "class C:\n    def m(self):\n" + "        y = 2\n" * (body - 1)
    assert [n for n, _, _ in long_functions(nested)] == (["m"] if found else [])
