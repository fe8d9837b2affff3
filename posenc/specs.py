"""Loading, validating and hashing ``spec/<id>.yaml`` files.

A spec is validated twice: structurally against ``spec/schema.json``, then semantically
(case parameters exist and satisfy their declarations, case inputs match the declared inputs,
defaults are valid). Every error names the file, the key path and the reason.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from . import spec_nested
from .diagnoses import Diagnosis
from .diagnoses import parse as parse_diagnoses
from .errors import SpecError
from .paths import spec_dir


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml: 8x faster
    """YAML loader that rejects duplicate keys and reads ``1e4`` as a float (YAML 1.2 style)."""


_FLOAT_RE = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
_StrictLoader.yaml_implicit_resolvers = {
    key: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:float"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_RE, list("-+0123456789."))


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    mapping: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node)
        if key in mapping:
            raise SpecError(f"line {key_node.start_mark.line + 1}: duplicate key {key!r}")
        mapping[key] = loader.construct_object(value_node, deep=True)
    return mapping


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


# Top-level spec keys that only say how to present the encoding (``plot``: what ``posenc plot``
# and docs/encodings.md draw). They stay out of the content hash, so redrawing a picture does
# not make every golden stale.
PRESENTATION_KEYS = frozenset({"plot"})
# Keys that say how to read a failure (``diagnoses``), not what the reference computes for the
# cases: also outside the content hash.
DIAGNOSTIC_KEYS = frozenset({"diagnoses"})


@dataclass(frozen=True)
class InputDecl:
    name: str
    kind: str  # "float" (converted to the dtype under test) or "int" (exact integers)
    shape: str
    optional: bool = False


@dataclass(frozen=True)
class Case:
    name: str
    params: dict[str, Any]
    inputs: dict[str, dict[str, Any]]  # input name -> {generator: arguments}


@dataclass(frozen=True)
class PropertyDecl:
    name: str
    params: dict[str, Any] = field(default_factory=dict)
    args: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """A name unique within a spec: the property name plus its non-default params."""
        if not self.params:
            return self.name
        extra = ",".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.name}[{extra}]"


@dataclass(frozen=True)
class Spec:
    id: str
    path: Path
    data: dict[str, Any]
    family: str
    function: str
    inputs: tuple[InputDecl, ...]
    parameters: dict[str, dict[str, Any]]
    cases: tuple[Case, ...]
    properties: tuple[PropertyDecl, ...]
    dtype_parameter: bool
    trigonometric: bool
    tolerances: dict[str, dict[str, Any]]
    diagnoses: tuple[Diagnosis, ...] = ()

    @property
    def module(self) -> str:
        """The reference module's name: the id unless several specs share one module."""
        return self.data.get("module", self.id)

    @property
    def output_kind(self) -> str:
        """'float' (compared within tolerances) or 'int' (exact integers, compared exactly)."""
        return self.data["output"].get("kind", "float")

    @property
    def title(self) -> str:
        return self.data["title"]

    def defaults(self) -> dict[str, Any]:
        """Declared defaults of the parameters that have one."""
        return {k: v["default"] for k, v in self.parameters.items() if "default" in v}

    def case(self, name: str) -> Case:
        for case in self.cases:
            if case.name == name:
                return case
        raise SpecError(f"{self.path}: no case named {name!r}")

    def content_hash(self) -> str:
        """Hash of the parsed content: comments and formatting do not change it, nor do the
        presentation-only keys (how the docs draw the encoding determines no golden number), nor
        the diagnoses (how a failure is read)."""
        return canonical_hash({k: v for k, v in self.data.items()
                               if k not in PRESENTATION_KEYS | DIAGNOSTIC_KEYS})


def canonical_hash(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


@cache
def _schema() -> dict[str, Any]:
    path = spec_dir() / "schema.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SpecError(f"{path}: cannot read the spec schema: {exc}") from exc


def _check_value(path: Path, where: str, name: str, decl: dict[str, Any], value: Any) -> None:
    schema = {k: v for k, v in decl.items() if k not in ("doc", "default", "required")}
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as exc:
        raise SpecError(f"{path}: {where}: parameter {name}={value!r}: {exc.message}") from None
    spec_nested.check_value(path, where, name, value)


def parse_spec(data: Any, path: Path) -> Spec:
    """Validate already-parsed spec content and build a :class:`Spec`."""
    if not isinstance(data, dict):
        raise SpecError(f"{path}: <top level>: expected a mapping, got {type(data).__name__}")
    validator = jsonschema.Draft202012Validator(_schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        lines = [f"{spec_nested.key_path(data, list(e.absolute_path))}: {e.message}"
                 for e in errors]
        raise SpecError(f"{path}: invalid spec:\n  " + "\n  ".join(lines))
    if data["id"] != path.stem:
        raise SpecError(f"{path}: id: {data['id']!r} does not match the file name {path.stem!r}")

    parameters: dict[str, dict[str, Any]] = data["parameters"]
    for name, decl in parameters.items():
        spec_nested.check_declaration(path, name, decl)
        if "default" in decl:
            _check_value(path, f"parameters.{name}.default", name, decl, decl["default"])
        elif not decl.get("required", False):
            raise SpecError(f"{path}: parameters.{name}: needs a default or 'required: true'")

    inputs = tuple(InputDecl(**d) for d in (
        {k: v for k, v in i.items() if k != "doc"} for i in data["inputs"]))
    input_names = {i.name for i in inputs}
    cases = []
    seen: set[str] = set()
    for idx, raw in enumerate(data["cases"]):
        where = f"cases[{idx}] ({raw['name']})"
        if raw["name"] in seen:
            raise SpecError(f"{path}: {where}.name: duplicate case name {raw['name']!r}")
        seen.add(raw["name"])
        for pname, value in raw["params"].items():
            if pname not in parameters:
                known = ", ".join(sorted(parameters)) or "none"
                raise SpecError(
                    f"{path}: {where}.params.{pname}: unknown parameter {pname!r} (known: {known})")
            _check_value(path, f"{where}.params", pname, parameters[pname], value)
        for pname, decl in parameters.items():
            if decl.get("required") and pname not in raw["params"]:
                raise SpecError(f"{path}: {where}.params: required parameter {pname!r} is missing")
        for iname in raw["inputs"]:
            if iname not in input_names:
                raise SpecError(
                    f"{path}: {where}.inputs.{iname}: unknown input {iname!r} "
                    f"(declared: {', '.join(sorted(input_names)) or 'none'})")
        for decl_in in inputs:
            if not decl_in.optional and decl_in.name not in raw["inputs"]:
                raise SpecError(f"{path}: {where}.inputs: required input {decl_in.name!r} is missing")
        cases.append(Case(raw["name"], dict(raw["params"]), dict(raw["inputs"])))

    properties = []
    for idx, raw in enumerate(data["properties"]):
        for pname, value in raw.get("params", {}).items():
            if pname not in parameters:
                raise SpecError(
                    f"{path}: properties[{idx}].params.{pname}: unknown parameter {pname!r}")
            _check_value(path, f"properties[{idx}].params", pname, parameters[pname], value)
        properties.append(PropertyDecl(raw["name"], dict(raw.get("params", {})),
                                       dict(raw.get("args", {}))))
    labels = [p.label for p in properties]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise SpecError(f"{path}: properties: declared twice with the same params: {dupes}")

    diagnoses: tuple[Diagnosis, ...] = ()
    if data.get("diagnoses"):
        diagnoses = _parse_diagnoses(data, path, parameters, inputs)

    return Spec(
        id=data["id"], path=path, data=data, family=data["family"], function=data["function"],
        inputs=inputs, parameters=parameters, cases=tuple(cases), properties=tuple(properties),
        dtype_parameter=bool(data.get("dtype_parameter", False)),
        trigonometric=bool(data.get("trigonometric", False)),
        tolerances=dict(data.get("tolerances", {})), diagnoses=diagnoses,
    )


def _parse_diagnoses(data: dict[str, Any], path: Path, parameters: dict[str, dict[str, Any]],
                     inputs: tuple[InputDecl, ...]) -> tuple[Diagnosis, ...]:
    import importlib

    module = data.get("module", data["id"])
    try:
        reference = getattr(importlib.import_module(f"posenc.reference.{module}"), data["function"])
    except (ImportError, AttributeError) as exc:
        raise SpecError(f"{path}: diagnoses: no reference posenc.reference.{module}."
                        f"{data['function']} to evaluate them with ({exc})") from None
    return parse_diagnoses(
        data["diagnoses"], path, module=module, reference=reference, parameters=parameters,
        inputs=tuple(i.name for i in inputs),
        check_value=lambda where, name, value: _check_value(path, where, name,
                                                            parameters[name], value))


def load_spec_file(path: Path) -> Spec:
    """Read and validate one spec file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        data = yaml.load(text, Loader=_StrictLoader)
    except SpecError as exc:
        raise SpecError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: not valid YAML: {exc}") from None
    return parse_spec(data, Path(path))


def parse_value(text: str) -> Any:
    """A value written as in a spec file (``8``, ``5e5``, ``half``, ``{factor: 8.0}``)."""
    return yaml.load(text, Loader=_StrictLoader)


def spec_ids(directory: Path | None = None) -> list[str]:
    """Ids of every spec in ``directory`` (the packaged spec folder by default), sorted."""
    directory = directory or spec_dir()
    return sorted(p.stem for p in directory.glob("*.yaml"))


@dataclass(frozen=True)
class _Parsed:
    blob: bytes  # the Spec, pickled: unpickling makes a caller's copy faster than deepcopy
    function: str


@cache
def _parsed(path: Path, mtime_ns: int) -> _Parsed:
    """One version of a spec file, read and validated once; callers get copies of it."""
    spec = load_spec_file(path)
    return _Parsed(pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL), spec.function)


def _cached(spec_id: str, directory: Path | None) -> _Parsed:
    directory = directory or spec_dir()
    path = directory / f"{spec_id}.yaml"
    if not path.is_file():
        known = ", ".join(spec_ids(directory)) or "none"
        raise SpecError(f"no spec {spec_id!r} in {directory} (known: {known})")
    return _parsed(path, path.stat().st_mtime_ns)


def load_spec(spec_id: str, directory: Path | None = None) -> Spec:
    """The validated spec named ``spec_id``, the caller's own: a file is parsed once per
    version, and every call returns a copy, so a caller changing its spec's dicts or lists
    changes no other caller's."""
    spec: Spec = pickle.loads(_cached(spec_id, directory).blob)
    return spec


class Specs(Mapping[str, Spec]):
    """Validated specs by id; each look-up returns a copy of its own, as :func:`load_spec`
    does (made on demand: asking for one spec copies only that one)."""

    def __init__(self, parsed: dict[str, _Parsed]) -> None:
        self._parsed = parsed

    def __getitem__(self, spec_id: str) -> Spec:
        spec: Spec = pickle.loads(self._parsed[spec_id].blob)
        return spec

    def __contains__(self, spec_id: object) -> bool:
        return spec_id in self._parsed

    def __iter__(self) -> Iterator[str]:
        return iter(self._parsed)

    def __len__(self) -> int:
        return len(self._parsed)

    def __repr__(self) -> str:
        return f"Specs({', '.join(self._parsed)})"

    def id_of_function(self, function: str) -> str | None:
        """The first spec (by id) whose ``function:`` is ``function``, without copying any."""
        return next((i for i, p in self._parsed.items() if p.function == function), None)


def load_all(directory: Path | None = None) -> Specs:
    """Every spec in ``directory``, by id (each validated now, each copied when read)."""
    return Specs({i: _cached(i, directory) for i in spec_ids(directory)})


def resolve_params(spec: Spec, params: Mapping[str, Any]) -> dict[str, Any]:
    """The spec's defaults overlaid with ``params`` (all explicit, as the reference receives them)."""
    return {**spec.defaults(), **params}
