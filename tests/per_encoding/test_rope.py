"""rope: RoFormer's rotation of feature pairs by position x theta_i, in both pairings (half,
interleaved), partial rotation and every frequency schedule, written here with NumPy float64 from
this folder's own schedules (test_rope_frequencies); one pair by hand and the relative property
<R_m q, R_n k> = <q, R_(n-m) k>."""

from __future__ import annotations

import math

import numpy as np
import pytest

import posenc

from .mirror import golden_cases, implementation
from .test_rope_frequencies import expected_schedule

EPS64 = float(np.finfo(np.float64).eps)


def rotate(x: np.ndarray, angles: np.ndarray, layout: str, factor: float = 1.0) -> np.ndarray:
    """x [..., seq, dim] with its first 2 n features turned by angles [..., seq, n]."""
    n = angles.shape[-1]
    a_index = np.arange(n) if layout == "half" else 2 * np.arange(n)
    b_index = a_index + (n if layout == "half" else 1)
    a, b = x[..., a_index], x[..., b_index]
    cos, sin = factor * np.cos(angles), factor * np.sin(angles)
    out = np.array(x, dtype=np.float64)
    out[..., a_index], out[..., b_index] = a * cos - b * sin, b * cos + a * sin
    return out


def expected_rope(x, positions, base, layout, rotary_dim, scaling, seq_len) -> np.ndarray:
    seq = x.shape[-2]
    if seq_len is None and positions is None:
        seq_len = seq
    elif seq_len is None and (scaling or {}).get("rope_type", (scaling or {}).get("type")) == "longrope":
        seq_len = int(np.max(positions)) + 1  # long factors once a position passes L0
    if rotary_dim is not None:
        scaling = {**(scaling or {}), "partial_rotary_factor": rotary_dim / x.shape[-1]}
    inv_freq, factor = expected_schedule(x.shape[-1], base, scaling, seq_len)
    positions = np.arange(seq) if positions is None else np.asarray(positions)
    if positions.ndim == 2:  # [batch, seq] applies to x[b, ..., s, :]
        positions = positions.reshape(positions.shape[0], *[1] * (x.ndim - 3), seq)
    return rotate(x, positions[..., None] * inv_freq, layout, factor)


def test_one_pair_by_hand() -> None:
    """d = 2: (a, b) at position m turns by m radians."""
    x = np.array([[1.0, 2.0], [3.0, -1.0]])
    out = posenc.rope(x, np.array([0, 5]))
    c, s = math.cos(5), math.sin(5)
    np.testing.assert_allclose(out, [[1.0, 2.0], [3 * c + s, -c + 3 * s]], rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize("case", golden_cases("rope"), ids=lambda c: c.name)
def test_reference_and_implementation_match_the_pair_rotation(case) -> None:
    p = case.params
    x, positions = case.inputs["x"], case.inputs.get("positions")
    expected = expected_rope(x, positions, p["base"], p["layout"], p["rotary_dim"], p["scaling"],
                             p["seq_len"])
    # an angle m theta is known to its last bits: the error grows with the largest position
    reach = max(1.0, float(np.max(np.abs(positions), initial=0)) if positions is not None
                else x.shape[-2])
    atol = 16 * EPS64 * reach * float(np.max(np.abs(x)))
    np.testing.assert_allclose(case.output, expected, rtol=1e-13, atol=atol)
    np.testing.assert_allclose(np.asarray(implementation("rope", case)), expected, rtol=1e-13,
                               atol=atol)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_scores_depend_only_on_the_distance(layout: str) -> None:
    rng = np.random.default_rng(3)
    q, k = rng.normal(size=(1, 16)), rng.normal(size=(1, 16))

    def score(m: int, n: int) -> float:
        return float(posenc.rope(q, np.array([m]), layout=layout)[0]
                     @ posenc.rope(k, np.array([n]), layout=layout)[0])

    np.testing.assert_allclose([score(3, 10), score(100, 107), score(-50, -43)],
                               score(0, 7), rtol=1e-12)
