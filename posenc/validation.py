"""Argument checks read from a spec's ``inputs:``: one checker for every encoding.

``Inputs("rope")`` reads the declarations of ``spec/rope.yaml`` once (at the encoding's import:
reading a file cannot be traced by torch.compile) and ``check(xp, x=x, positions=positions)``
enforces them on every call with plain Python on ``.shape`` and ``.dtype`` (no array op, no
host sync, so it traces under torch.compile fullgraph, jax.jit and tf.function):

- each present input is an array (``None`` is allowed for ``optional`` inputs);
- its dtype fits its ``kind``: ``float`` a real floating dtype, ``int`` an integer one,
  ``bool`` the boolean dtype;
- its shape matches one of the ``|``-separated patterns of ``shape``, e.g. ``[..., seq, dim]``
  (``...`` any number of leading dims, an integer a fixed size, a name any size, anything
  else such as ``2·span`` any size);
- a name used in two places stands for one size (``q [..., q_len, d]`` and
  ``k [..., k_len, d]`` must agree on ``d``);
- the ``float`` inputs share one dtype: a spec's float inputs are all given in the dtype
  under test.

Shapes the patterns cannot say (``broadcasts to ...``, arithmetic between sizes), value ranges
and rules across parameters stay in the encoding. Each message names the input and its value;
``messages`` replaces the text of a rule where an encoding words it its own way (keys below).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from . import array_api, paths
from .errors import ParameterError, SpecError

# Default texts, by rule. ``messages`` may replace them, per input or axis: a rank error of input
# n looks up "rank:n", "shape:n", "shape", "rank"; an axis disagreement on axis a found at input n
# "shape:n", "axis:a", "shape", "axis" (or "known" for a size given beforehand); a kind error
# "kind:n", then "kind:<kind>".
DEFAULT_MESSAGES: dict[str, str] = {
    "array": "{name} must be an array, got {type}",
    "kind:float": "{name} must have a real floating dtype, got {dtype}",
    "kind:int": "{name} must have an integer dtype, got {dtype}",
    "kind:bool": "{name} must have a boolean dtype, got {dtype}",
    "rank": "{name} must have shape {pattern}, got shape {shape}",
    "axis": ("{name} has shape {shape} but {first} has shape {first_shape}: they must agree on "
             "{axis} ({size} != {first_size})"),
    "known": "{name} must have shape {pattern} = {expected}, got shape {shape}",
    "dtypes": "{names} must share one dtype, got {listed}",
}

_KIND_DTYPES = {"float": "real floating", "int": "integral", "bool": "bool"}


@dataclass(frozen=True)
class Declared:
    """One input of a spec, with its shape patterns parsed (None where the shape is prose)."""

    name: str
    kind: str
    shape: str
    optional: bool
    patterns: tuple[tuple[str | int | None, ...], ...] | None


def parse_shape(text: str) -> tuple[tuple[str | int | None, ...], ...] | None:
    """``"[seq] | [batch, seq]"`` -> ``(("seq",), ("batch", "seq"))``: per dim a name, a fixed
    size, ``"..."`` or None (any size). None when the text is not a list of patterns."""
    patterns = []
    for alternative in text.split("|"):
        alternative = alternative.strip()
        if not (alternative.startswith("[") and alternative.endswith("]")):
            return None
        body = alternative[1:-1].strip()
        dims: list[str | int | None] = []
        for token in (t.strip() for t in body.split(",")) if body else ():
            if token == "..." or token.isidentifier():
                dims.append(token)
            elif token.isdigit():
                dims.append(int(token))
            else:
                dims.append(None)
        if dims.count("...") > 1:
            return None
        patterns.append(tuple(dims))
    return tuple(patterns)


_KEY = re.compile(r"^(?P<indent>\s*)(?P<dash>-\s+)?(?P<key>[a-z_]+):\s*(?P<value>.*?)\s*$")


def _scalar(text: str) -> Any:
    if text.startswith('"'):
        return json.loads(text)
    if text.startswith("'"):
        return text[1:-1].replace("''", "'")
    text = text.split(" #", 1)[0].strip()
    return {"true": True, "false": False}.get(text, text)


def read_declarations(path: Path) -> tuple[Declared, ...]:
    """The ``inputs:`` of the spec file at ``path``, read without a YAML parser.

    Importing yaml and jsonschema (what :func:`posenc.specs.load_spec` needs) would add a tenth
    of a second to every ``import`` of an encoding; the block's layout is fixed by the schema,
    and tests check that this reading agrees with ``load_spec(...).inputs`` for every spec.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith("inputs:"))
    except StopIteration:
        raise SpecError(f"{path}: no inputs: block") from None
    items: list[dict[str, Any]] = []
    item_indent = None
    for line in lines[start + 1:]:
        if line and not line[0].isspace() and line[0] not in "-#":
            break
        match = _KEY.match(line)
        if not match:
            continue
        if match["dash"]:
            items.append({})
            item_indent = len(match["indent"]) + len(match["dash"])
        elif item_indent is None or len(match["indent"]) != item_indent:
            continue  # a line inside a multi-line doc
        if match["key"] in ("name", "kind", "shape", "optional"):
            items[-1][match["key"]] = _scalar(match["value"])
    return tuple(Declared(i["name"], i["kind"], i["shape"], bool(i.get("optional", False)),
                          parse_shape(i["shape"])) for i in items)


def _spec_file(spec_id: str) -> Path:
    """The shipped spec: an implementation checks its own declarations, whatever
    ``$POSENC_SPEC_DIR`` points the harness at."""
    return paths.shipped_spec_dir() / f"{spec_id}.yaml"


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


Message = str | Callable[[dict[str, Any]], str]


class Inputs:
    """The checker of one spec's inputs (see the module docstring).

    ``same_dtype``: True for every float input, False for none, or the names that must share
    one dtype. ``skip_kind``: inputs whose dtype rule stays in the encoding (e.g. positions that
    may also be float32). ``messages``: texts replacing the defaults (keys above), each a
    ``str.format`` template or a function of the fields:

    - every error: ``name`` (the input), ``shape_of`` and ``size_of`` (the shapes of the inputs
      and the sizes of the axes seen so far, by name);
    - "array": ``type``; "kind": ``dtype``, ``kind``;
    - "rank" and "axis": ``shape``, ``pattern`` (as the spec writes it), ``expected`` (the
      pattern with the sizes known so far), ``min_rank``, ``shapes`` / ``shapes_and`` (every
      input with its shape, joined with commas / "and"), ``inputs`` and ``patterns`` (every
      declared input and its pattern, joined with commas);
    - "axis" also: ``axis``, ``size``, and ``first``, ``first_shape``, ``first_size`` (the input
      that set the axis; for a size known beforehand ``first`` is the axis, ``first_shape`` None);
    - "dtypes": ``names`` / ``commas`` (joined with "and" / commas), ``listed`` ("q float32, k
      float64"), ``is_listed`` ("q is float32, ..."), ``dtypes`` / ``dtypes_and`` (in input
      order), ``distinct`` (sorted, once each), ``dtype`` (by name).
    """

    def __init__(self, spec_id: str, *, same_dtype: bool | Collection[str] = True,
                 skip_kind: Collection[str] = (), messages: Mapping[str, Message] | None = None
                 ) -> None:
        self.spec_id = spec_id
        self.declared = read_declarations(_spec_file(spec_id))
        names = [d.name for d in self.declared]
        unknown = {*skip_kind, *(same_dtype if not isinstance(same_dtype, bool) else ())} - {
            *names}
        if unknown:
            raise SpecError(f"{spec_id}: no input(s) {', '.join(sorted(unknown))} (declared: "
                            f"{', '.join(names)})")
        if same_dtype is True:
            same_dtype = [d.name for d in self.declared if d.kind == "float"]
        self.same_dtype = tuple(same_dtype or ())
        self.skip_kind = frozenset(skip_kind)
        self._plan = tuple(
            (d, None if d.name in self.skip_kind else _KIND_DTYPES[d.kind],
             None if d.patterns is None else tuple(_plan(p) for p in d.patterns))
            for d in self.declared)
        self.messages: dict[str, Message] = {**DEFAULT_MESSAGES, **(messages or {})}

    def check(self, xp: ModuleType, axes: Mapping[str, int] | None = None, **arrays: Any
              ) -> dict[str, Any]:
        """Raise :class:`ParameterError` unless ``arrays`` fit the declarations; returns the size
        of each named axis (``{"seq": 5, "dim": 8}``). Inputs not passed are not checked.
        ``axes``: sizes known beforehand, e.g. from a parameter (``{"num_buckets": 32}``)."""
        # the hot path of every call: plain loops over the plan made in __init__
        sizes: dict[str, Any] = dict(axes) if axes else {}
        set_by: dict[str, str] = {}  # axis -> the input that set it (absent: known beforehand)
        for decl, kind, plans in self._plan:
            name = decl.name
            if name not in arrays:
                continue
            a = arrays[name]
            if a is None and decl.optional:
                continue
            if not (hasattr(a, "dtype") and hasattr(a, "shape")):
                self._fail(("array",), arrays, sizes, name=name, type=type(a).__name__)
            if kind is not None and not xp.isdtype(a.dtype, kind):
                self._fail((f"kind:{name}", f"kind:{decl.kind}"), arrays, sizes, name=name,
                           kind=decl.kind, dtype=array_api.dtype_name(a.dtype))
            if plans is None:
                continue
            shape = a.shape
            axes_at = _match(plans, shape)
            if axes_at is None:
                self._fail((f"rank:{name}", f"shape:{name}", "shape", "rank"), arrays, sizes,
                           **self._shape_fields(decl, tuple(shape), sizes))
            for i, axis in axes_at:
                size = shape[i]
                if axis not in sizes:
                    sizes[axis] = size
                    set_by[axis] = name
                elif size is not None and sizes[axis] is not None and sizes[axis] != size:
                    self._axis_error(decl, axis, size, arrays, sizes, set_by)
        if len(self.same_dtype) > 1:
            self._check_dtypes(arrays, sizes)
        return sizes

    def _axis_error(self, decl: Declared, axis: str, size: Any, arrays: Mapping[str, Any],
                    sizes: dict[str, Any], set_by: dict[str, str]) -> None:
        by = set_by.get(axis)
        fields = self._shape_fields(decl, tuple(arrays[decl.name].shape), sizes)
        if by is None:  # a size known beforehand
            self._fail((f"shape:{decl.name}", f"axis:{axis}", "shape", "known"), arrays, sizes,
                       **fields, axis=axis, size=size, first=axis, first_shape=None,
                       first_size=sizes[axis])
        self._fail((f"shape:{decl.name}", f"axis:{axis}", "shape", "axis"), arrays, sizes,
                   **fields, axis=axis, size=size, first=by,
                   first_shape=tuple(arrays[by].shape), first_size=sizes[axis])

    def _shape_fields(self, decl: Declared, shape: tuple[Any, ...], sizes: dict[str, Any]
                      ) -> dict[str, Any]:
        tokens = [t.strip() for t in decl.shape.split("|")[0].strip()[1:-1].split(",")]
        expected = [str(sizes[t]) if t in sizes else t for t in tokens]
        return {"name": decl.name, "shape": shape, "pattern": decl.shape,
                "expected": f"[{', '.join(expected)}]",
                "min_rank": min(len(p) - ("..." in p) for p in decl.patterns or ((),)),
                "inputs": ", ".join(d.name for d in self.declared),
                "patterns": ", ".join(d.shape for d in self.declared)}

    def _fail(self, keys: tuple[str, ...], arrays: Mapping[str, Any], sizes: dict[str, Any],
              **fields: Any) -> None:
        shape_of = {n: tuple(a.shape) for n, a in arrays.items() if hasattr(a, "shape")}
        listed = [f"{n} {s}" for n, s in shape_of.items()]
        fields = {"shape_of": shape_of, "size_of": dict(sizes), "shapes": ", ".join(listed),
                  "shapes_and": _join(listed) if listed else "", **fields}
        message = next(self.messages[k] for k in keys if k in self.messages)
        raise ParameterError(message(fields) if callable(message) else message.format(**fields))

    def _check_dtypes(self, arrays: Mapping[str, Any], sizes: dict[str, Any]) -> None:
        dtype = None
        for n in self.same_dtype:
            a = arrays.get(n)
            if a is None:
                continue
            if dtype is None:
                dtype = a.dtype
            elif a.dtype != dtype:
                break
        else:
            return
        present = [(n, arrays[n]) for n in self.same_dtype if arrays.get(n) is not None]
        names = [n for n, _ in present]
        dtypes = [array_api.dtype_name(a.dtype) for _, a in present]
        pairs = list(zip(names, dtypes, strict=True))
        self._fail(("dtypes",), arrays, sizes, name=names[0], names=_join(names),
                   commas=", ".join(names), listed=", ".join(f"{n} {d}" for n, d in pairs),
                   is_listed=", ".join(f"{n} is {d}" for n, d in pairs),
                   dtypes=", ".join(dtypes), dtypes_and=_join(dtypes),
                   distinct=", ".join(sorted(set(dtypes))), dtype=dict(pairs))


# A pattern planned for matching: (rank, exact, literal dims, named dims), each dim as
# (index into the shape, negative from the end after "...", and the size or axis name).
_Plan = tuple[int, bool, tuple[tuple[int, int], ...], tuple[tuple[int, str], ...]]


def _plan(pattern: tuple[str | int | None, ...]) -> _Plan:
    if "..." in pattern:
        cut = pattern.index("...")
        at = [*range(cut), *range(cut + 1 - len(pattern), 0)]
        dims = [d for d in pattern if d != "..."]
    else:
        at, dims = list(range(len(pattern))), list(pattern)
    return (len(dims), "..." not in pattern,
            tuple((i, d) for i, d in zip(at, dims, strict=True) if isinstance(d, int)),
            tuple((i, d) for i, d in zip(at, dims, strict=True) if isinstance(d, str)))


def _match(plans: tuple[_Plan, ...], shape: Any) -> tuple[tuple[int, str], ...] | None:
    """The named dims of the first pattern ``shape`` fits, or None."""
    rank = len(shape)
    for length, exact, fixed, named in plans:
        if rank < length or (exact and rank != length):
            continue
        fits = True
        for i, size in fixed:  # a loop, not `in`: dynamo mis-evaluates `in` on SymInts
            if shape[i] != size:
                fits = False
        if fits:
            return named
    return None
