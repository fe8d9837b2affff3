"""Selecting checks by id and by parameter values, for ``--skip`` and expectations files.

A pattern is a glob over the check id (``backend/device/dtype/mode/encoding/kind:name``), as
before, optionally followed by parameter values in brackets: ``rope[layout=interleaved]``
selects every check of rope whose case or property declares ``layout: interleaved`` (the
spec's defaults filled in). Before the brackets, a glob without ``/`` matches the encoding
(``rope``, ``t5_*``), one with ``/`` the whole id. Values are written as in a spec (YAML:
``base=10000``, ``scaling=null``); ``*`` matches any value but null; a dotted key looks into
a dict (``scaling.rope_type=yarn``, which also reads the legacy ``type``). Several
``key=value`` items, comma-separated, must all match. Brackets without ``=`` stay a glob
character class.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from dataclasses import dataclass
from typing import Any

from posenc.errors import ParameterError

_PARAMS = re.compile(r"^(?P<glob>.*?)\[(?P<items>[^\[\]]*=[^\[\]]*)\]$")
ANY = "*"
_MISSING = object()


@dataclass(frozen=True)
class Selector:
    glob: str
    params: tuple[tuple[str, Any], ...] = ()
    by_encoding: bool = False


@functools.lru_cache(maxsize=512)
def parse(pattern: str) -> Selector:
    """``pattern`` as a :class:`Selector`; a malformed ``[key=value]`` is a ParameterError."""
    import yaml

    match = _PARAMS.match(pattern)
    if not match:
        return Selector(pattern)
    items = []
    for item in match["items"].split(","):
        key, eq, text = (part.strip() for part in item.partition("="))
        if not eq or not key:
            raise ParameterError(f"check selector {pattern!r}: {item.strip()!r} is not KEY=VALUE")
        try:
            value = ANY if text == ANY else yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ParameterError(f"check selector {pattern!r}: value {text!r}: {exc}") from None
        items.append((key, value))
    glob = match["glob"] or "*"
    return Selector(glob, tuple(items), by_encoding="/" not in glob)


def _lookup(params: dict[str, Any], key: str) -> Any:
    value: Any = params
    for part in key.split("."):
        if not isinstance(value, dict):
            return _MISSING
        if part not in value and part == "rope_type" and "type" in value:
            part = "type"
        value = value.get(part, _MISSING)
    return value


def _matches(actual: Any, expected: Any) -> bool:
    if expected == ANY:
        return actual is not _MISSING and actual is not None
    if actual is _MISSING:
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
    return all(_matches(_lookup(params, key), value) for key, value in selector.params)
