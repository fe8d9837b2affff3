"""The magnitude a golden case's tolerance scales with (``scale`` in conformance/tolerances.py).

The old rule took the largest magnitude among the expected output and the float inputs, so a
case with a bias of 1000 on masked-out scores got a float32 tolerance of 4e-3 on outputs of
order 1, which that bias never touches. The scale now follows the output quantity:

    scale = max(|expected output|, min(sensitivity, largest |float input|))

``sensitivity`` is the largest change of the output, divided by ``DELTA``, when every float
input element is multiplied by ``1 ± DELTA`` (random signs, fixed seed; the NumPy reference
recomputed in float64): the output's magnitude times its condition number. A large input
raises the scale only as far as the output actually moves with it (a cancelling sum, softmax
over large logits), never beyond the old rule; an input the output ignores does not raise it.
Float32 rounding of the inputs moves the output by about eps times this sensitivity, which
no implementation avoids.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from posenc import catalog
from posenc.golden import GoldenCase, output_array
from posenc.specs import Spec, resolve_params

DELTA = 2.0**-20  # far above float64 rounding, small enough for the first-order change
DRAWS = 2
_CACHE: dict[tuple[str, str, str], float] = {}  # (spec, case, digest of its arrays) -> scale


def _largest(values: Any) -> float:
    finite = np.asarray(values)[np.isfinite(values)]
    return float(np.abs(finite).max(initial=0.0))


def sensitivity(spec: Spec, case: GoldenCase, *, seed: int = 0) -> float:
    """max |f(x (1 ± DELTA)) - f(x)| / DELTA over a few sign draws (0 without float inputs)."""
    floats = [d.name for d in spec.inputs
              if d.kind == "float" and case.inputs.get(d.name) is not None]
    if not floats:
        return 0.0
    reference = catalog.reference_function(spec)
    params = resolve_params(spec, case.params)
    rng = np.random.default_rng(seed)
    worst = 0.0
    for _ in range(DRAWS):
        args = dict(case.inputs)
        for name in floats:
            value = np.asarray(args[name], dtype=np.float64)
            args[name] = value * (1.0 + DELTA * rng.choice([-1.0, 1.0], size=value.shape))
        moved = output_array(reference(*args.values(), **params))
        if moved.shape != case.output.shape or np.any(np.isfinite(moved) != np.isfinite(
                case.output)):
            raise ValueError("the perturbed output changed shape or finiteness")
        finite = np.isfinite(moved)
        worst = max(worst, _largest(moved[finite] - case.output[finite]) / DELTA)
    return worst


def _largest_input(spec: Spec, case: GoldenCase) -> float:
    return max([_largest(v) for d in spec.inputs
                if d.kind == "float" and (v := case.inputs.get(d.name)) is not None],
               default=0.0)


def case_scale(spec: Spec, case: GoldenCase) -> float:
    """The tolerance scale of ``case`` (see the module docstring); 1 when everything is 0."""
    digest = hashlib.sha256(np.ascontiguousarray(case.output).tobytes())
    for value in case.inputs.values():
        digest.update(b"" if value is None else np.ascontiguousarray(value).tobytes())
    key = (spec.id, case.name, digest.hexdigest())
    if key not in _CACHE:
        largest = _largest_input(spec, case)
        try:
            moved = min(sensitivity(spec, case), largest)
        except Exception:  # a reference that rejects perturbed inputs: the old rule
            moved = largest
        _CACHE[key] = max(_largest(case.output), moved) or 1.0
    return _CACHE[key]
