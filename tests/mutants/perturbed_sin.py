"""An array-API namespace (NumPy's, via array-api-compat) whose ``sin`` is off by 0.1%.

Passed as ``posenc conformance --backend mutants.perturbed_sin`` it must make the run fail and
name the encodings that use sin (rope, sinusoidal) but not those that do not (learned).
"""

from array_api_compat.numpy import *
from array_api_compat.numpy import __array_api_version__
from array_api_compat.numpy import sin as _sin


def sin(x):
    return _sin(x) * (1 + 1e-3)
