"""Spec parameters that hold a mapping are checked at load by the rules the implementations
apply to them, so a typo inside a nested dict (``facter`` for ``factor``) fails the spec, not a
golden made from it (the NumPy references read only the keys they know) nor a backend.

Every parameter a spec declares with JSON type ``object`` needs a checker here, keyed by the
parameter's name, unless its declaration closes the mapping itself
(``additionalProperties: false``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .encodings.rope_frequencies import check_scaling
from .errors import ParameterError, SpecError


def _check_vllm_rope_parameters(value: Mapping[str, Any]) -> None:
    """vLLM's get_rope dict, by the implementation itself at a head size that fits it (LongRoPE's
    factor lists fix the rotary width; nothing else it checks depends on the head size)."""
    from .encodings.vllm_rope_frequencies import vllm_rope_frequencies

    head_size = 128
    factors = value.get("short_factor")
    if isinstance(factors, Sequence) and factors:
        partial = value.get("partial_rotary_factor", 1.0)
        partial = partial if isinstance(partial, int | float) and partial > 0 else 1.0
        head_size = max(2, round(2 * len(factors) / partial))
    vllm_rope_frequencies(head_size, max_position=8192, rope_parameters=value)


def _check_layer_config(value: Mapping[str, Any]) -> None:
    """A transformers config dict for layer_schedule, by the implementation itself."""
    from .encodings.layer_schedule import layer_rope_parameters

    layer_rope_parameters(value)


# parameter name -> the implementations' own check of that mapping (raises ParameterError)
CHECKERS: dict[str, Callable[[Any], None]] = {
    "config": _check_layer_config,  # layer_schedule: a model's transformers config
    "scaling": check_scaling,  # rope, rope_frequencies, mrope: transformers rope_scaling dicts
    "rope_parameters": _check_vllm_rope_parameters,  # vllm_rope_frequencies
}


def _takes_mappings(decl: Mapping[str, Any]) -> bool:
    kinds = decl.get("type", [])
    return "object" in ([kinds] if isinstance(kinds, str) else kinds)


def check_declaration(path: Any, name: str, decl: Mapping[str, Any]) -> None:
    """A mapping-valued parameter must have a checker (or be closed by its schema)."""
    if (_takes_mappings(decl) and name not in CHECKERS
            and decl.get("additionalProperties") is not False):
        raise SpecError(
            f"{path}: parameters.{name}: a mapping-valued parameter needs a checker in "
            f"posenc/spec_nested.py or 'additionalProperties: false' (checked: "
            f"{', '.join(sorted(CHECKERS))})")


def check_value(path: Any, where: str, name: str, value: Any) -> None:
    """Check a mapping value of parameter ``name`` the way the implementations will."""
    if name not in CHECKERS or not isinstance(value, Mapping):
        return
    try:
        CHECKERS[name](value)
    except ParameterError as exc:
        raise SpecError(f"{path}: {where}.{name}: {exc}") from None


def key_path(data: Any, parts: Sequence[Any]) -> str:
    """A schema error's key path, each case named beside its index: ``cases[3] (linear_scaling)``."""
    out = ""
    for i, part in enumerate(parts):
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
        if i == 1 and parts[0] == "cases" and isinstance(part, int):
            name = _case_name(data, part)
            out += f" ({name})" if name else ""
    return out or "<top level>"


def _case_name(data: Any, index: int) -> str | None:
    try:
        name = data["cases"][index]["name"]
    except (KeyError, IndexError, TypeError):
        return None
    return name if isinstance(name, str) else None
