"""FIRE: bad inputs on every backend, the goldens against the paper's appendix code
(transcribed below), and broken implementations that the properties catch."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import posenc
from posenc import golden
from posenc.catalog import specs
from posenc.encodings import public_functions
from posenc.errors import ParameterError
from posenc.specs import resolve_params

from ..failing import failing_properties

W1, B1, W2, B2 = [0.5, -1.0], [0.25, 0.5], [[1.0, -0.5, 2.0], [0.5, 0.25, -1.0]], [0.0, 1.0, -1.0]


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((2, 4, W1, B1, W2, B2), {"c": 0.0}, r"c=0.0 must be a finite number > 0"),
        ((2, 4, W1, B1, W2, B2), {"c": -0.1}, r"c=-0.1 must be a finite number > 0"),
        ((2, 4, W1, B1, W2, B2), {"threshold": 0}, r"threshold=0 must be a finite number > 0"),
        ((2, 4, W1, B1, W2, B2), {"threshold": math.inf},
         r"threshold=inf must be a finite number > 0"),
        ((2, 4, W1, B1, W2, B2), {"eps": -1e-6}, r"eps=-1e-06 must be a finite number >= 0"),
        ((2, 4, W1, B1, W2, B2), {"eps": math.nan}, r"eps=nan must be a finite number >= 0"),
        ((2, 4, W1, B1, W2[0], B2), {}, r"w1, b1, w2, b2 must have shapes \[hidden\], \[hidden\], "
                                       r"\[hidden, heads\], \[heads\], got w1 \(2,\), b1 \(2,\), "
                                       r"w2 \(3,\), b2 \(3,\)"),
        ((2, 4, W1, B1[:1], W2, B2), {}, r"got w1 \(2,\), b1 \(1,\)"),
        ((2, 4, W1, B1, W2, B2[:2]), {}, r"w2 \(2, 3\), b2 \(2,\)"),
        ((2, 4, [*W1, 1.0], [*B1, 1.0], W2, B2), {}, r"got w1 \(3,\), b1 \(3,\), w2 \(2, 3\)"),
        ((2, 4, [1, 2], B1, W2, B2), {}, r"w1 must have a real floating dtype, got int"),
        ((5, 4, W1, B1, W2, B2), {}, r"q_len=5 must be <= k_len=4"),
        ((-1, 4, W1, B1, W2, B2), {}, r"q_len=-1 must be >= 0"),
        ((2, True, W1, B1, W2, B2), {}, r"k_len must be an int, got True \(bool\)"),
    ],
)
def test_bad_input_raises_a_parameter_error_naming_it(pe, args, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.fire(*args, **kwargs)


def test_mixed_dtypes_are_refused_naming_them() -> None:
    with pytest.raises(ParameterError, match="w1, b1, w2 and b2 must share one dtype, got "
                                             "float32, float64"):
        posenc.fire(2, 4, np.array(W1, np.float32), np.array(B1), np.array(W2), np.array(B2))


def test_the_result_has_the_dtype_of_the_inputs(pe) -> None:
    arrays = [np.array(a, np.float32) for a in (W1, B1, W2, B2)]
    out = pe.fire(3, 5, *arrays)
    assert "float32" in str(out.dtype) and tuple(out.shape) == (3, 3, 5)


# --------------------------------------------------------------------------------------------
# the paper's appendix code, transcribed (Li et al. 2023, appendix: FIRE in PyTorch)
# --------------------------------------------------------------------------------------------


def appendix_fire(w1, b1, w2, b2, q_len: int, k_len: int, c: float, threshold: float,
                  eps: float) -> np.ndarray:
    """The appendix forward pass in float64, with init_L * L_multiplier = threshold: queries
    and keys share positions arange(k_len); rows of the last q_len queries are returned."""
    torch = pytest.importorskip("torch")
    positions = torch.arange(k_len, dtype=torch.float64)
    rel_distance = positions[:, None] - positions[None, :]
    pos_normalizer = torch.max(positions, torch.tensor(abs(threshold), dtype=torch.float64))
    pos_normalizer = pos_normalizer[:, None]
    rel_distance = torch.log(torch.abs(c * rel_distance) + 1)
    pos_normalizer = torch.log(torch.abs(c * pos_normalizer) + 1) + eps
    normalized_distance = rel_distance / pos_normalizer
    mlp = torch.nn.Sequential(torch.nn.Linear(1, w1.shape[0]), torch.nn.ReLU(),
                              torch.nn.Linear(w1.shape[0], w2.shape[1])).double()
    with torch.no_grad():
        mlp[0].weight.copy_(torch.from_numpy(w1[:, None]))
        mlp[0].bias.copy_(torch.from_numpy(b1))
        mlp[2].weight.copy_(torch.from_numpy(w2.T.copy()))
        mlp[2].bias.copy_(torch.from_numpy(b2))
        fire_bias = mlp(normalized_distance.unsqueeze(-1))
    fire_bias = fire_bias.unsqueeze(0).permute(0, 3, 1, 2)[0]
    return fire_bias[:, k_len - q_len:, :].numpy()


@pytest.mark.parametrize("name", [c.name for c in specs()["fire"].cases])
def test_golden_vs_appendix_code(name) -> None:
    spec = specs()["fire"]
    case = golden.load(spec).cases[name]
    p = resolve_params(spec, case.params)
    arrays = [case.inputs[k] for k in ("w1", "b1", "w2", "b2")]
    expected = appendix_fire(*arrays, p["q_len"], p["k_len"], p["c"], p["threshold"], p["eps"])
    np.testing.assert_allclose(case.output, expected, rtol=1e-13, atol=1e-13)
    if p["eps"] == 0 and p["q_len"]:
        # the appendix code's own eps = 1e-6 shrinks x by at most eps / psi(max(L, i)), which
        # moves head h by at most that times sum_k |w1_k w2_kh|: tiny at the initial c, L
        with_eps = appendix_fire(*arrays, p["q_len"], p["k_len"], p["c"], p["threshold"], 1e-6)
        first_query = p["k_len"] - p["q_len"]
        dx = 1e-6 / math.log1p(p["c"] * max(p["threshold"], first_query))
        bound = dx * (np.abs(arrays[0])[:, None] * np.abs(arrays[2])).sum(axis=0)
        moved = np.abs(with_eps - case.output).max(axis=(1, 2))
        assert np.all(moved <= bound * (1 + 1e-9)) and moved.max() > 0, (moved, bound)


def test_far_queries_are_normalized_by_their_own_position() -> None:
    """Identity MLP: x = psi(i - j) / psi(max(L, i)); below L the normalizer is psi(L)."""
    one = np.ones(1)
    out = posenc.fire(3, 8, one, np.zeros(1), np.ones((1, 1)), np.zeros(1), c=1.0,
                      threshold=6.0)[0]
    np.testing.assert_allclose(out[0, 0], math.log(6) / math.log(7), rtol=1e-15)  # i = 5 < L
    np.testing.assert_allclose(out[1, 0], 1.0, rtol=1e-15)  # i = 6 = L
    np.testing.assert_allclose(out[2, :3], np.log1p([7, 6, 5]) / math.log(8), rtol=1e-15)


# --------------------------------------------------------------------------------------------
# broken implementations fail the properties (no goldens involved)
# --------------------------------------------------------------------------------------------

_IMPL = public_functions()


def _no_threshold(q_len: int, k_len: int, *arrays: Any, threshold: float = 512.0,
                  **kw: Any) -> Any:
    """The normalizer psi(max(1, i)): the threshold L forgotten."""
    return _IMPL["fire"](q_len, k_len, *arrays, threshold=1.0, **kw)


def _queries_at_start(q_len: int, k_len: int, *arrays: Any, **kw: Any) -> Any:
    """Queries at positions 0..q_len-1 instead of the last q_len (a KV-cache bug)."""
    return _IMPL["fire"](k_len, k_len, *arrays, **kw)[:, :q_len]


def _failing_properties(**overrides: Any) -> set[str]:
    return failing_properties(["fire"], name="broken_fire", **overrides)


def test_unbroken_backend_passes_the_properties() -> None:
    assert _failing_properties() == set()


def test_forgotten_threshold_fails_the_properties() -> None:
    assert {"fire_interpolated_distance", "fire_relative_below_threshold"} <= \
        _failing_properties(fire=_no_threshold)


def test_queries_at_the_start_fail_the_properties() -> None:
    assert {"fire_kv_cache_alignment", "fire_interpolated_distance"} <= \
        _failing_properties(fire=_queries_at_start)
