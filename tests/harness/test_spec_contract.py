"""The spec is authoritative: implementations and references agree with it on names and defaults."""

from __future__ import annotations

import inspect

import pytest

from posenc.catalog import reference_function, specs
from posenc.encodings import public_functions

from ..conftest import run_cli

SPECS = sorted(specs())
EXTRA_IMPLEMENTATION_PARAMS = {"dtype", "device"}  # array plumbing, not encoding parameters


@pytest.mark.parametrize("spec_id", SPECS)
def test_implementation_signature_matches_spec(spec_id: str) -> None:
    spec = specs()[spec_id]
    impl = public_functions()[spec.function]
    params = inspect.signature(impl).parameters
    inputs = [i.name for i in spec.inputs]
    assert [p for p in params if p in inputs] == inputs, "array inputs in spec order"
    for name, decl in spec.parameters.items():
        assert name in params, f"{spec.function} lacks spec parameter {name!r}"
        if "default" in decl:
            assert params[name].default == decl["default"], name
        else:
            assert params[name].default is inspect.Parameter.empty, name
    extra = set(params) - set(inputs) - set(spec.parameters)
    assert extra <= EXTRA_IMPLEMENTATION_PARAMS, extra
    assert ("dtype" in params) == spec.dtype_parameter


@pytest.mark.parametrize("spec_id", SPECS)
def test_reference_takes_every_parameter_explicitly(spec_id: str) -> None:
    """No defaults in references: goldens are made from the spec's defaults, not from code."""
    spec = specs()[spec_id]
    params = inspect.signature(reference_function(spec)).parameters
    assert set(params) == {i.name for i in spec.inputs} | set(spec.parameters)
    for name in spec.parameters:
        assert params[name].default is inspect.Parameter.empty, name


def test_posenc_exports_every_encoding() -> None:
    import posenc

    for spec in specs().values():
        assert getattr(posenc, spec.function) is public_functions()[spec.function]
        assert spec.function in dir(posenc)
    with pytest.raises(AttributeError):
        posenc.no_such_encoding  # noqa: B018


def test_cli_list_shows_family() -> None:
    proc = run_cli("list")
    assert proc.returncode == 0
    rows = {line.split()[0]: line.split()[1] for line in proc.stdout.splitlines()[1:]}
    assert rows == {s.id: s.family for s in specs().values()}
