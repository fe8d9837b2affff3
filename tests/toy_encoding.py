"""A fixture encoding, toy_scale (x times a factor), that tests add to a copy of the package to
show that an encoding needs only its own files: its spec, reference and implementation texts."""

SPEC = """\
id: toy_scale
title: a fixture encoding (x times a factor)
family: other
summary: exists only in a test, to add an encoding by its own files
references:
  - title: none
    url: https://example.invalid/
formula: |
  y = c x
function: toy_scale
inputs:
  - name: x
    kind: float
    shape: "[..., n]"
    doc: values
output:
  shape: "[..., n]"
  dtype: same as x
parameters:
  factor: {type: number, default: 3.0, doc: the factor}
cases:
  - name: small
    params: {}
    inputs:
      x: {value: [1.0, -2.0, 0.5]}
  - name: random
    params: {factor: -0.25}
    inputs:
      x: {normal: {shape: [2, 5], seed: 7}}
properties: []
"""

REFERENCE = """\
import numpy as np


def toy_scale(x, *, factor):
    return np.asarray(x, dtype=np.float64) * factor
"""

IMPLEMENTATION = """\
from typing import Any

from .. import array_api, validation

__all__ = ["toy_scale"]

_INPUTS = validation.Inputs("toy_scale")


def toy_scale(x: Any, *, factor: float = 3.0) -> Any:
    _INPUTS.check(array_api.namespace(x=x), x=x)
    return x * {factor}
"""
