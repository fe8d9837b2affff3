"""Which position id drives each rotary feature, for the M-RoPE section orderings engines use.

Everything here is host-side Python on static parameters (torch.compile, jax.jit and
tf.function see constants): one map per configuration from frequency ``j`` to the row of the
position ids that drives it, for the pair's first feature (``a``) and its second (``b``). All
orderings but ``xdrope`` give both features of a pair the same row, so they stay rotations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ParameterError

ORDERINGS = ("contiguous", "interleaved", "ernie", "bailing", "xdrope")

# model_type of a config (text or top-level) -> the ordering its rotary embedding uses
_MODEL_TYPES = (("ernie4_5_vl", "ernie"), ("bailing", "bailing"), ("ming", "bailing"),
                ("hunyuan_vl", "xdrope"))


def sections_of(value: Any) -> tuple[int, ...]:
    """The section sizes as ints (any number of them; the ordering checks how many)."""
    if not isinstance(value, Sequence | np.ndarray) or isinstance(value, str) or not len(value):
        raise ParameterError(
            f"sections={value!r} must be a non-empty list of ints (frequencies per position "
            "id, e.g. [t, h, w])")
    for i, s in enumerate(value):
        if isinstance(s, bool) or not isinstance(s, int | np.integer):
            raise ParameterError(f"sections={list(value)!r}: sections[{i}]={s!r} is not an int")
        if s < 0:
            raise ParameterError(f"sections={list(value)!r}: sections[{i}]={s} is negative")
    return tuple(int(s) for s in value)


def config_ordering(scaling: Mapping[str, Any] | None) -> str | None:
    """The ordering a config dict names: ``mrope_interleaved`` (Qwen3-VL), ``xdrope_section``
    or ``rope_type`` 'xdrope' (Hunyuan's legacy keys), or its ``model_type``."""
    if not scaling:
        return None
    named = set()
    flag = scaling.get("mrope_interleaved", False)
    if not isinstance(flag, bool | np.bool_):
        raise ParameterError(f"scaling['mrope_interleaved'] must be a bool, got {flag!r}")
    if flag:
        named.add("interleaved")
    if "xdrope_section" in scaling or "xdrope" in (scaling.get("rope_type"),
                                                   scaling.get("type")):
        named.add("xdrope")
    model_type = scaling.get("model_type")
    if model_type is not None:
        if not isinstance(model_type, str):
            raise ParameterError(f"scaling['model_type'] must be a string, got {model_type!r}")
        named.update(o for prefix, o in _MODEL_TYPES if model_type.startswith(prefix))
    if len(named) > 1:
        raise ParameterError(f"scaling names the orderings {sorted(named)!r}: give one")
    return named.pop() if named else None


def resolve(ordering: Any, interleaved: Any, scaling: Mapping[str, Any] | None) -> str:
    """One ordering from the ``ordering`` parameter, the ``interleaved`` flag and the config."""
    if not isinstance(interleaved, bool | np.bool_):
        raise ParameterError(f"interleaved must be a bool, got {interleaved!r}")
    if ordering is not None and ordering not in ORDERINGS:
        raise ParameterError(f"ordering={ordering!r} is not one of "
                             f"{', '.join(map(repr, ORDERINGS))}")
    named = {"ordering": ordering, "interleaved": "interleaved" if interleaved else None,
             "scaling": config_ordering(scaling)}
    chosen = {v for v in named.values() if v is not None}
    if len(chosen) > 1:
        given = ", ".join(f"{k} -> {v!r}" for k, v in named.items() if v is not None)
        raise ParameterError(f"conflicting M-RoPE orderings ({given}): give one")
    return chosen.pop() if chosen else "contiguous"


def config_sections(scaling: Mapping[str, Any]) -> Any:
    """``mrope_section``, or Hunyuan's legacy ``xdrope_section`` (they must agree)."""
    found = {k: scaling[k] for k in ("mrope_section", "xdrope_section") if k in scaling}
    if len(found) == 2 and sections_of(found["mrope_section"]) != sections_of(
            found["xdrope_section"]):
        raise ParameterError(f"scaling['mrope_section']={found['mrope_section']!r} conflicts "
                             f"with scaling['xdrope_section']={found['xdrope_section']!r}")
    return next(iter(found.values()), None)


def _equal_spatial(sections: tuple[int, ...], h: int, w: int, ordering: str,
                   order: str) -> None:
    if len(sections) != 3:
        raise ParameterError(f"sections={list(sections)!r}: ordering={ordering!r} takes 3 "
                             f"sections {order}")
    if sections[h] != sections[w]:
        raise ParameterError(
            f"sections={list(sections)!r}: ordering={ordering!r} alternates h and w "
            f"frequencies, so the h and w sections of {order} must be equal "
            f"({sections[h]} != {sections[w]})")


def axes_count(ordering: str, sections: tuple[int, ...]) -> int:
    """How many rows of position ids the ordering reads."""
    return len(sections) if ordering in ("contiguous", "xdrope") else 3


def feature_axes(ordering: str, sections: tuple[int, ...],
                 n: int) -> tuple[list[int], list[int]]:
    """``(axis_a, axis_b)``: the row of position ids that drives the first and the second
    feature of each of the ``n`` frequency pairs."""
    if ordering == "interleaved" and len(sections) != 3:
        raise ParameterError(f"sections={list(sections)!r}: ordering='interleaved' takes 3 "
                             "sections [t, h, w]")
    if ordering == "ernie":
        _equal_spatial(sections, 0, 1, ordering, "[h, w, t]")
    if ordering == "bailing":
        _equal_spatial(sections, 1, 2, ordering, "[t, h, w]")
    if sum(sections) != n:
        raise ParameterError(
            f"sections={list(sections)!r} sum to {sum(sections)}, but the rotary width has "
            f"{n} frequencies (rotary_dim / 2): they must sum to {n}")
    if ordering == "contiguous":  # Qwen2-VL: runs t^s0 h^s1 w^s2 (any number of runs)
        axis = [a for a, count in enumerate(sections) for _ in range(count)]
        return axis, axis
    if ordering == "interleaved":
        return _interleaved(sections, n)
    if ordering in ("ernie", "bailing"):  # h, w alternate over 2 s_h frequencies, t the rest
        spatial = 2 * (sections[0] if ordering == "ernie" else sections[1])
        axis = [(1 if j % 2 == 0 else 2) if j < spatial else 0 for j in range(n)]
        return axis, axis
    # xdrope: runs of 2 s_i over the doubled vector [theta_0..theta_{n-1}, theta_0..]
    doubled = [a for a, count in enumerate(sections) for _ in range(2 * count)]
    return doubled[:n], doubled[n:]


def _interleaved(sections: tuple[int, ...], n: int) -> tuple[list[int], list[int]]:
    """Qwen3-VL: h at ``j % 3 == 1`` below ``3 s_h``, w at ``j % 3 == 2`` below ``3 s_w``."""
    axis = [1 if j % 3 == 1 and j < 3 * sections[1] else
            2 if j % 3 == 2 and j < 3 * sections[2] else 0 for j in range(n)]
    counts = tuple(axis.count(a) for a in range(3))
    if counts != sections:
        raise ParameterError(
            f"sections={list(sections)!r} with interleaved=True: every third frequency from "
            f"index 1 (h) and 2 (w) up to 3 * section gives counts {list(counts)!r} among {n} "
            "frequencies; the h and w sections must satisfy 3 * sections[1] <= n + 1 and "
            "3 * sections[2] <= n")
    return axis, axis
