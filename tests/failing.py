"""Which checks fail: the one helper the harness tests share to run a (deliberately broken)
backend through ``posenc.conformance.run`` and name what the harness caught."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from posenc.backends import get_backend
from posenc.backends.backend import Backend
from posenc.conformance import Options, run


def broken_numpy(name: str, **overrides: Any) -> Backend:
    """The NumPy backend with some functions replaced (a mutant), under its own name."""
    return dataclasses.replace(get_backend("numpy"), name=name, overrides=overrides)


def failing_properties(encodings: Iterable[str], *, max_examples: int = 3, name: str = "broken",
                       **overrides: Any) -> set[str]:
    """Names of the properties of ``encodings`` that fail in eager float64 on the NumPy backend
    with ``overrides``; with no overrides, what fails on posenc's own reference (nothing)."""
    return failing_checks(broken_numpy(name, **overrides), encodings=encodings,
                          max_examples=max_examples, cases=False, qualified=False)


def failing_checks(backend: Backend, *, encodings: Iterable[str] | None = None,
                   dtypes: Iterable[str] = ("float64",), max_examples: int = 8,
                   qualified: bool = True, **options: Any) -> set[str]:
    """The failing checks of ``backend`` run eagerly: ``kind:name`` (or the bare name with
    ``qualified=False``) over every encoding run."""
    return {name for names in failing_by_encoding(
        backend, encodings=encodings, dtypes=dtypes, max_examples=max_examples,
        qualified=qualified, **options).values() for name in names}


def failing_by_encoding(backend: Backend, *, encodings: Iterable[str] | None = None,
                        dtypes: Iterable[str] = ("float64",), max_examples: int = 8,
                        qualified: bool = True, **options: Any) -> dict[str, set[str]]:
    """encoding -> its failing checks (``kind:name``, or the bare name with
    ``qualified=False``), for ``backend`` run eagerly in ``dtypes``."""
    selected = {} if encodings is None else {"encodings": list(encodings)}
    out: dict[str, set[str]] = {}
    for result in run(Options(backends=[backend], dtypes=list(dtypes), modes=["eager"],
                              max_examples=max_examples, **selected, **options)):
        if result.failed:
            check = result.check
            out.setdefault(check.encoding, set()).add(
                f"{check.kind}:{check.name}" if qualified else check.name)
    return out
