"""NoPE: a layer without positional encoding returns its queries and keys unchanged."""

from __future__ import annotations

import numpy as np


def nope(x, positions):
    return np.array(x, dtype=np.float64)  # positions are ignored
