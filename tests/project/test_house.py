"""The house rules of the four shipped homes (``posenc/``, ``backends/``, ``conformance/``,
``bench/``): no function over 80 lines, no module over 500, and at most 25 modules at
``conformance/``'s root (the rest live in sub-packages with one job each); no private import
between modules of posenc/ or from a test; every spec id with its own
``tests/per_encoding/test_<id>.py``. Read from the source, so a breach fails here, named with
its place, before review."""

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


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def private_imports(source: str, relative: bool = True) -> list[tuple[int, str]]:
    """``(line, what)`` of every import of a private (underscore) posenc module or name:
    absolute ``posenc...`` imports, and relative ones where the source is a module of posenc."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and ((relative and node.level)
                                                 or (node.module or "").startswith("posenc")):
            module = "." * node.level + (node.module or "")
            parts = [*(node.module or "").split("."), *(a.name for a in node.names)]
            if any(_private(p) for p in parts):
                found.append((node.lineno, f"from {module} import "
                              + ", ".join(a.name for a in node.names)))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names
                      if a.name.startswith("posenc") and any(_private(p) for p in a.name.split("."))]
    return found


def _imports_of(paths: list[Path], relative: bool = True) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{line}: {what}"
            for path in paths for line, what in private_imports(path.read_text(), relative)]


def test_no_module_of_posenc_imports_another_ones_private_names() -> None:
    found = _imports_of(sorted((ROOT / "posenc").rglob("*.py")))
    assert found == [], ("private imports between modules of posenc/ (give what is shared a public "
                         "name in a public module):\n" + "\n".join(found))


def test_no_test_imports_a_private_posenc_name() -> None:
    # the tests' own helpers import each other relatively: those are not posenc's names
    found = _imports_of(sorted((ROOT / "tests").rglob("*.py")), relative=False)
    assert found == [], ("tests importing private posenc names (test the public name, or make it "
                         "public):\n" + "\n".join(found))


@pytest.mark.parametrize(("line", "private"), [
    # the private imports this rule removed (posenc/reference, diagnoses, encodings, tests)
    ("from ._rope_schedules import frequencies, kind", True),
    ("from ..reference._rope_schedules import kind", True),
    ("from . import _vision", True),
    ("from posenc.reference.transformer_xl import _relative_row", True),
    ("import posenc.encodings._vision", True),
    ("from ..rotary.schedules import frequencies, kind", False),
    ("from . import vision, __version__", False),
    ("from numpy._core import umath", False),  # another project's privates are its own business
])
def test_the_private_import_check_reads_relative_and_absolute_imports(line: str, private: bool) -> None:
    assert bool(private_imports(line + "\n")) is private
    assert bool(private_imports(line + "\n", relative=False)) is (private and "posenc" in line)


def _spec_ids() -> list[str]:
    from posenc.specs import spec_ids

    return spec_ids()


def test_every_spec_id_has_its_per_encoding_test_file() -> None:
    missing = [f"tests/per_encoding/test_{spec_id}.py" for spec_id in _spec_ids()
               if not (ROOT / "tests" / "per_encoding" / f"test_{spec_id}.py").is_file()]
    assert missing == [], ("encodings without their own test file (the encoding's maths against an "
                           "independent computation written in the test):\n" + "\n".join(missing))
