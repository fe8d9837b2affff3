"""The diagnosis transforms are a package of per-encoding modules found by discovery: its
modules import only the shared base (no circle, no private name of another module), and a new
encoding's transforms need its own file and nothing else."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ..conftest import ROOT
from ..toy_encoding import REFERENCE, SPEC

PACKAGE = ROOT / "posenc" / "diagnoses"
MODULES = sorted(p for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "base.py"))


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every import of a module of this package, relative ones
    written from the package (``.base``, ``..reference.rope``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            found.append(("." * node.level + (node.module or ""), [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
    return found


def test_every_transform_module_imports_the_base_and_no_sibling() -> None:
    assert {p.stem for p in MODULES} >= {"generic", "rope", "t5", "alibi", "cope"}
    for path in MODULES:
        imports = _imports(path)
        siblings = [m for m, names in imports if m == "." or (m.startswith(".")
                                                            and not m.startswith("..")
                                                            and m != ".base")]
        assert siblings == [], f"{path.name} imports {siblings}: only .base is shared"
        assert (".base", ["register"]) in [(m, [n for n in names if n == "register"])
                                           for m, names in imports], path.name


def test_the_base_imports_no_transform_module_by_name() -> None:
    """The base finds the modules at run time: no import statement of it names one, so the
    package has no import circle."""
    modules = [m for m, _ in _imports(PACKAGE / "base.py")]
    assert not [m for m in modules if m.startswith(".") and not m.startswith("..")], modules
    assert [m for m, _ in _imports(PACKAGE / "__init__.py")] == [".base"]


def test_no_module_imports_a_private_name() -> None:
    for path in [*MODULES, PACKAGE / "base.py", PACKAGE / "__init__.py"]:
        for module, names in _imports(path):
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            assert not private, f"{path.name} imports {private} from {module}"


def test_the_package_is_no_longer_a_module_beside_private_diagnoses() -> None:
    assert not (ROOT / "posenc" / "diagnoses.py").exists()
    assert not list((ROOT / "posenc").glob("_*diagnoses.py"))


def test_every_declared_transform_is_registered_by_exactly_one_module() -> None:
    """Each name a spec uses is registered, and by one module only (each module's register
    calls read from its source)."""
    from posenc.diagnoses import transforms
    from posenc.specs import load_all

    owners: dict[str, list[str]] = {}
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "register":
                for keyword in node.keywords:
                    owners.setdefault(str(keyword.arg), []).append(path.stem)
    assert {name: where for name, where in owners.items() if len(where) > 1} == {}
    assert set(owners) == set(transforms())
    used = {d.transform for spec in load_all().values() for d in spec.diagnoses if d.transform}
    assert used <= set(owners)


def test_registering_a_name_twice_is_refused() -> None:
    from posenc.diagnoses import Transform, register, transforms

    taken = next(iter(transforms()))
    with pytest.raises(RuntimeError, match=f"{taken!r} registered twice"):
        register(**{taken: Transform("again", lambda ref, inputs, params: None)})


_SPEC = SPEC + """\
diagnoses:
  - name: factor_applied_twice
    transform: toy_factor_squared
    explanation: "x times factor², the factor applied by two layers"
"""

_TRANSFORMS = """\
from .base import Transform, call, register


def _factor_squared(ref, inputs, params):
    return call(ref, inputs, {**params, "factor": params["factor"] ** 2})


register(toy_factor_squared=Transform("factor squared", _factor_squared, params=("factor",),
                                      modules=("toy_scale",)))
"""

_LOAD = """\
import json, sys
import numpy as np
import posenc
from posenc.catalog import reference_function
from posenc.diagnoses import evaluate
from posenc.errors import SpecError
from posenc.specs import load_spec, resolve_params

try:
    spec = load_spec("toy_scale")
except SpecError as exc:
    print(json.dumps({"file": posenc.__file__, "error": str(exc)}))
    sys.exit(0)
(diagnosis,) = spec.diagnoses
out = evaluate(diagnosis, reference_function(spec), {"x": np.array([1.0, -2.0, 0.5])},
               resolve_params(spec, {}))
print(json.dumps({"file": posenc.__file__, "out": np.asarray(out).tolist(),
                  "describe": diagnosis.describe(diagnosis.params)}))
"""


def _load_in(tree: Path) -> dict[str, object]:
    """The fixture spec loaded and its diagnosis evaluated by the posenc copied into ``tree``."""
    run = subprocess.run([sys.executable, "-c", _LOAD], cwd=tree, capture_output=True,
                         text=True, timeout=120, env={"PYTHONPATH": str(tree),
                                                      "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert Path(str(result["file"])).is_relative_to(tree), result["file"]
    return result


def test_a_new_encoding_s_transform_needs_only_its_own_file(tmp_path: Path) -> None:
    """In a copy of the core, an encoding is added as docs/contributing.md's "Adding an
    encoding" says (its spec, its reference, and its transform in posenc/diagnoses/<id>.py); no
    existing file is edited, and the spec naming the new transform loads and evaluates it."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "posenc", tmp_path / "posenc", ignore=ignore)
    (tmp_path / "spec").mkdir()
    shutil.copy(ROOT / "spec" / "schema.json", tmp_path / "spec" / "schema.json")
    (tmp_path / "spec" / "toy_scale.yaml").write_text(_SPEC)
    (tmp_path / "posenc" / "reference" / "toy_scale.py").write_text(REFERENCE)

    before = _load_in(tmp_path)  # without the module the transform is unknown
    assert "unknown transform 'toy_factor_squared'" in str(before["error"])

    (tmp_path / "posenc" / "diagnoses" / "toy_scale.py").write_text(_TRANSFORMS)
    after = _load_in(tmp_path)
    assert after["out"] == [9.0, -18.0, 4.5]  # 3² × x
    assert after["describe"] == "factor squared"

    copied = {p.relative_to(tmp_path / "posenc") for p in (tmp_path / "posenc").rglob("*.py")}
    shipped = {p.relative_to(ROOT / "posenc") for p in (ROOT / "posenc").rglob("*.py")}
    added = {Path("reference/toy_scale.py"), Path("diagnoses/toy_scale.py")}
    assert copied == shipped | added
    for rel in shipped:
        assert (tmp_path / "posenc" / rel).read_bytes() == (ROOT / "posenc" / rel).read_bytes()


def test_the_package_s_public_helpers() -> None:
    """call passes inputs positionally in declared order; positions defaults to arange over
    x's second-last axis; round_significand rounds to nearest even."""
    from posenc.diagnoses import call, positions, round_significand

    assert call(lambda a, b, *, c: (a, b, c), {"a": 1, "b": None}, {"c": 2}) == (1, None, 2)
    assert positions({"x": np.zeros((2, 5, 4)), "positions": None}).tolist() == [0, 1, 2, 3, 4]
    assert positions({"positions": np.array([7, 9])}).tolist() == [7, 9]
    # 8 significant bits: 257 lies halfway between 256 and 258 and goes to the even 256;
    # 259 halfway between 258 and 260 goes to 260
    assert round_significand(np.array([257.0, 259.0, 1.0]), 8).tolist() == [256.0, 260.0, 1.0]
