"""Materialising the inputs a ``plot:`` section names.

Besides the golden generators (normal, integers, arange, value: :mod:`posenc.inputs`), a plot
may ask for ``ones``/``zeros`` of a shape, the identity ``eye`` (attention with v = I returns
its weights), a causal ``tril`` mask, ``repeat`` (one row at every position) and ``encoding``:
the output of another encoding, computed by posenc (e.g. a sinusoidal table fed to ``combine``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import inputs as golden_inputs
from ..errors import SpecError
from ..specs import Spec
from .implementation import call

GOLDEN_GENERATORS = ("normal", "integers", "arange", "value")


def materialise(spec: Spec, plot_inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The arrays of ``plot_inputs`` (input name -> plot input mapping), by input name."""
    kinds = {decl.name: decl.kind for decl in spec.inputs}
    return {name: build(generator, kinds[name], f"{spec.path}: plot.inputs.{name}")
            for name, generator in plot_inputs.items()}


def build(generator: Mapping[str, Any], kind: str, where: str) -> np.ndarray:
    """One plot input, as the ``kind`` ('float', 'int' or 'bool') of input it feeds."""
    ((name, args),) = generator.items()
    if name in GOLDEN_GENERATORS:
        return golden_inputs.generate({name: args}, kind, where)
    if name == "ones":
        return np.ones(tuple(args["shape"]))
    if name == "zeros":
        return np.zeros(tuple(args["shape"]))
    if name == "eye":
        return np.eye(args)
    if name == "tril":
        return np.tril(np.ones((args, args), dtype=bool))
    if name == "repeat":
        one = build(args["of"], kind, f"{where}.repeat.of")
        return np.broadcast_to(one, (args["times"], *one.shape)).copy()
    if name == "encoding":
        return _encoding_output(args, where)
    raise SpecError(f"{where}: unknown plot input {name!r}")  # the schema admits only the above


def _encoding_output(args: Mapping[str, Any], where: str) -> np.ndarray:
    from ..specs import load_spec
    from .declaration import check_params

    other = load_spec(args["id"])
    params = args.get("params", {})
    check_params(other, params, where=f"{where}.encoding.params")
    arrays = materialise(other, args.get("inputs", {}))
    out = call(other, arrays, params)
    if isinstance(out, tuple):
        raise SpecError(f"{where}: encoding {other.id!r} returns a tuple, not one array")
    return out
