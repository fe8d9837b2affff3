"""An array-API namespace whose ``sin`` has its sign flipped (rotations run backwards)."""

from array_api_compat.numpy import *
from array_api_compat.numpy import __array_api_version__
from array_api_compat.numpy import sin as _sin


def sin(x):
    return -_sin(x)
