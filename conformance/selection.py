"""Selecting checks by id and by parameter values, for ``--skip`` and expectations files.

A pattern is a glob over the check id (``backend/device/dtype/mode/encoding/kind:name``), as
before, optionally followed by parameter values in brackets: ``rope[layout=interleaved]``
selects every check of rope whose case or property declares ``layout: interleaved`` (the
spec's defaults filled in: ``rope[layout=half]`` also selects the checks that leave it out).
Before the brackets, a glob without ``/`` matches the encoding (``rope``, ``t5_*``), one with
``/`` the whole id. Values are written as in a spec (YAML: ``base=10000``, ``scaling=null``);
``*`` matches any value but null; a dotted key looks into a dict (``scaling.rope_type=yarn``,
which also reads the legacy ``type``), and ``rope_type`` alone looks at any depth;
``positions.ndim=2`` selects the golden cases whose ``positions`` input has two axes.
``key in {a, b}`` matches any of the values. Several items, comma-separated, must all match.
Brackets without ``=`` or `` in `` stay a glob character class.
"""

from __future__ import annotations

import fnmatch
import functools
from dataclasses import dataclass
from typing import Any

from posenc.backends.adapter_base import MISSING, lookup
from posenc.errors import ParameterError

ANY = "*"


@dataclass(frozen=True)
class Selector:
    glob: str
    params: tuple[tuple[str, Any], ...] = ()
    by_encoding: bool = False


def _brackets(pattern: str) -> tuple[str, str] | None:
    """``(glob, items)`` when ``pattern`` ends in a bracketed group holding ``=`` or `` in ``
    (lists and sets may nest inside it), else None: a glob character class stays one."""
    if not pattern.endswith("]"):
        return None
    depth = 0
    for i in range(len(pattern) - 1, -1, -1):
        depth += {"]": 1, "}": 1, "[": -1, "{": -1}.get(pattern[i], 0)
        if depth == 0:
            items = pattern[i + 1: -1]
            if "=" in items or " in " in items:
                return pattern[:i], items
            return None
    return None


def _items(text: str) -> list[str]:
    """``text`` split at the commas outside brackets and braces."""
    out, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"[": 1, "{": 1, "]": -1, "}": -1}.get(char, 0)
        if char == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    return [*out, text[start:]]


@functools.lru_cache(maxsize=512)
def parse(pattern: str) -> Selector:
    """``pattern`` as a :class:`Selector`; a malformed ``[key=value]`` is a ParameterError."""
    import yaml

    found = _brackets(pattern)
    if not found:
        return Selector(pattern)
    glob, text = found
    items = []
    for item in _items(text):
        key, eq, value_text = (part.strip() for part in item.partition("="))
        choices = False
        if not eq and " in " in item:
            key, _, value_text = (part.strip() for part in item.partition(" in "))
            choices = True
        if (not eq and not choices) or not key:
            raise ParameterError(f"check selector {pattern!r}: {item.strip()!r} is not KEY=VALUE "
                                 "or KEY in {A, B}")
        try:
            if choices:  # {a, b} or [a, b]: one of the values
                value: Any = In(tuple(yaml.safe_load("[" + value_text.strip()[1:-1] + "]")))
            else:
                value = ANY if value_text == ANY else yaml.safe_load(value_text)
        except yaml.YAMLError as exc:
            raise ParameterError(f"check selector {pattern!r}: value {value_text!r}: {exc}"
                                 ) from None
        items.append((key, value))
    glob = glob or "*"
    return Selector(glob, tuple(items), by_encoding="/" not in glob)


@dataclass(frozen=True)
class In:
    """``key in {a, b}``: any of the values."""

    values: tuple[Any, ...]


def _matches(actual: Any, expected: Any) -> bool:
    if isinstance(expected, In):
        return any(_matches(actual, v) for v in expected.values)
    if expected == ANY:
        return actual is not MISSING and actual is not None
    if actual is MISSING:
        return expected is None
    return bool(actual == expected)


def check_params(spec: Any, check: Any) -> dict[str, Any]:
    """The parameters a check declares: its case's or property's, over the spec's defaults."""
    declared: dict[str, Any] = {}
    if check.kind == "case":
        declared = dict(spec.case(check.name).params)
    elif check.kind == "property" and check.property_index >= 0:
        declared = dict(spec.properties[check.property_index].params)
    return {**spec.defaults(), **declared}


def selects(pattern: str, check: Any, specs: dict[str, Any]) -> bool:
    """Whether ``pattern`` selects ``check`` (see the module docstring)."""
    selector = parse(pattern)
    target = check.encoding if selector.by_encoding else check.id
    if not fnmatch.fnmatchcase(target, selector.glob):
        return False
    if not selector.params:
        return True
    spec = specs.get(check.encoding)
    if spec is None:
        return False
    params = check_params(spec, check)
    return all(_matches(_input_ndim(spec, check, key) if key.endswith(".ndim")
                        else lookup(params, key), value) for key, value in selector.params)


def _input_ndim(spec: Any, check: Any, key: str) -> Any:
    """``positions.ndim``: the number of axes of a golden case's input (MISSING for a
    property, whose inputs are drawn, and for an input the case leaves out)."""
    name = key[: -len(".ndim")]
    if check.kind != "case" or name not in {i.name for i in spec.inputs}:
        return MISSING
    return _case_ndims(spec.id, spec.content_hash(), check.name).get(name, MISSING)


@functools.lru_cache(maxsize=1024)
def _case_ndims(spec_id: str, content_hash: str, case_name: str) -> dict[str, int]:
    from posenc.catalog import specs
    from posenc.inputs import generate

    spec = specs()[spec_id]
    case = spec.case(case_name)
    kinds = {i.name: i.kind for i in spec.inputs}
    return {name: int(generate(generator, kinds[name]).ndim)
            for name, generator in case.inputs.items() if name in kinds}
