"""The encodings posenc knows: each spec with its reference module, found by id."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .errors import SpecError
from .specs import Spec, Specs, load_all


def specs() -> Specs:
    """Every shipped spec by id; each look-up returns the caller's own copy."""
    return load_all()


def spec_for_function(name: str) -> Spec | None:
    """The spec whose ``function:`` is ``name`` (None for helpers without a spec)."""
    found = specs()
    spec_id = found.id_of_function(name)
    return None if spec_id is None else found[spec_id]


def reference_module(spec: Spec) -> ModuleType:
    try:
        return importlib.import_module(f"posenc.reference.{spec.module}")
    except ModuleNotFoundError as exc:
        raise SpecError(
            f"{spec.path}: no reference module posenc/reference/{spec.module}.py") from exc


def reference_function(spec: Spec) -> Callable[..., Any]:
    module = reference_module(spec)
    try:
        return getattr(module, spec.function)
    except AttributeError:
        raise SpecError(
            f"{spec.path}: function: posenc.reference.{spec.module} defines no {spec.function!r}"
        ) from None
