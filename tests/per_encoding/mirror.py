"""What the per-encoding test files share: a spec's golden cases with their parameters resolved,
and posenc's NumPy implementation run on a case in float64, so that each file can hold both the
reference (through the goldens) and the implementation to its own independent computation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import posenc
from posenc import golden
from posenc.catalog import specs
from posenc.specs import resolve_params


@dataclass(frozen=True)
class Case:
    name: str
    inputs: dict[str, np.ndarray]  # omitted optional inputs left out
    params: dict[str, Any]  # every parameter, the spec's defaults filled in
    output: np.ndarray  # the golden: the float64 reference's output


def golden_cases(spec_id: str) -> list[Case]:
    spec = specs()[spec_id]
    return [Case(name, {k: v for k, v in case.inputs.items() if v is not None},
                 resolve_params(spec, case.params), case.output)
            for name, case in golden.load(spec).cases.items()]


def implementation(spec_id: str, case: Case, **override: Any) -> Any:
    """posenc's own function on the case's inputs and parameters (NumPy, float64 inputs)."""
    spec = specs()[spec_id]
    extra = {"dtype": np.float64} if spec.dtype_parameter else {}
    return getattr(posenc, spec.function)(**case.inputs, **{**case.params, **extra, **override})
