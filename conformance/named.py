"""Checking an implementation on the published configurations of named models only
(``posenc check ENCODING TARGET --named llama-3.1-8b``, ``check(..., named=...)``).

A golden case belongs to a named model when it computes that model's rope in the encoding's
own terms: for ``rope``, the model's rope parameters (transformers' dict, as
:func:`posenc.dialects.rope_layers` reads the config), its pairing and its head width; for
``ggml_rope``, the model's configuration translated to ggml parameters
(:func:`posenc.dialects.to_ggml`, LongRoPE with its short and its long factors). The match is
by value, not by case name, so a case whose parameters drift from the published config stops
being selected. Every other check of the encoding is deselected."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from posenc.dialects import rope_layers, to_ggml
from posenc.dialects.named import NAMED
from posenc.dialects.transformers import RopeLayer
from posenc.errors import ParameterError
from posenc.specs import Spec


def _width(case: Any) -> int | None:
    x = case.inputs.get("x", {})
    for generator in x.values():
        if isinstance(generator, dict) and "shape" in generator:
            return int(generator["shape"][-1])
    return None


def _rope(spec: Spec, case: Any, layer: RopeLayer) -> bool:
    params = {**spec.defaults(), **case.params}
    layout = "interleaved" if layer.interleaved else "half"
    return (params.get("scaling") == layer.scaling and params.get("layout") == layout
            and params.get("rotary_dim") is None and params.get("base") == 10000.0
            and _width(case) == layer.head_dim)


def _ggml_translations(layer: RopeLayer) -> list[dict[str, Any]]:
    options: list[dict[str, Any]] = [{}]
    if layer.rope_type == "longrope":  # llama.cpp picks the factors by the allocated context
        options.append({"n_ctx": int(layer.scaling["original_max_position_embeddings"]) + 1})
    out = []
    for option in options:
        try:
            out.append(to_ggml(layer, **option))
        except ParameterError:  # a configuration ggml cannot hold has no ggml case
            pass
    return out


def _ggml(spec: Spec, case: Any, layer: RopeLayer) -> bool:
    params = {**spec.defaults(), **case.params}
    return any(all(params.get(k) == v for k, v in translated.items())
               for translated in _ggml_translations(layer))


MATCHERS = {"rope": _rope, "ggml_rope": _ggml}


def model(name: str) -> dict[str, RopeLayer]:
    """The rope layers of a named model (ParameterError listing the known ones)."""
    if name not in NAMED:
        raise ParameterError(f"named={name!r} is not a named configuration (known: "
                             f"{', '.join(sorted(NAMED))})")
    return rope_layers(NAMED[name])


def cases(spec: Spec, name: str) -> list[str]:
    """The golden cases of ``spec`` that compute the named model's rope (every layer type)."""
    layers = model(name)
    matcher = MATCHERS.get(spec.id)
    if matcher is None:
        raise ParameterError(f"named={name!r}: {spec.id} has no named cases (encodings with "
                             f"them: {', '.join(sorted(MATCHERS))})")
    return [c.name for c in spec.cases
            if any(matcher(spec, c, layer) for layer in layers.values())]


def skips(names: str | Iterable[str], specs: dict[str, Spec], encodings: Iterable[str]
          ) -> list[str]:
    """Skip patterns that leave, of each encoding, only the golden cases of the named models."""
    names = [names] if isinstance(names, str) else list(names)
    patterns: list[str] = []
    for encoding in encodings:
        spec = specs[encoding]
        keep: set[str] = set()
        for name in names:
            found = cases(spec, name)
            if not found:
                elsewhere = [e for e in sorted(MATCHERS) if e != encoding and e in specs
                             and cases(specs[e], name)]
                raise ParameterError(
                    f"named={name!r}: {encoding} has no golden case of this configuration"
                    + (f" (it has cases in: {', '.join(elsewhere)})" if elsewhere else ""))
            keep.update(found)
        patterns += [f"*/{encoding}/property:*", f"*/{encoding}/gradient:*"]
        patterns += [f"*/{encoding}/case:{c.name}" for c in spec.cases if c.name not in keep]
    return patterns
