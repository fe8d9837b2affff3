"""Small constructor arguments and call arguments for every layer (posenc.layers.all_layers()),
shared by the framework layer tests (torch, JAX, Keras).

``SMALL[name]``: keyword arguments of the layer's constructor. ``CALLS[name](rng)``: the call
arguments ``(args, kwargs)`` as Python ints and NumPy arrays (float32 floats, int64 integers),
which each framework converts to its own arrays. ``call(name)`` draws them with a fixed seed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Call = tuple[tuple[Any, ...], dict[str, Any]]


def _normal(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _ints(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


SMALL: dict[str, dict[str, Any]] = {
    "ALiBiBias": dict(num_heads=2),
    "AxialRotaryEmbedding": dict(),
    "ConvPositionEncoding": dict(channels=4, kernel_size=3),
    "CoPEBias": dict(head_dim=4, npos_max=5),
    "DebertaRelativeScores": dict(head_dim=4, position_buckets=4, max_relative_positions=8),
    "FIREBias": dict(num_heads=2, hidden=4),
    "FloaterPositionEmbedding": dict(dim=4, hidden=4, steps=1),
    "HierarchicalPositionEmbedding": dict(num_positions=4, dim=3),
    "KERPLEBias": dict(num_heads=2),
    "LearnedPositionEmbedding": dict(num_positions=6, dim=4),
    "MultimodalRotaryEmbedding": dict(sections=[1, 1, 2]),
    "RecurrentPositionEmbedding": dict(dim=3),
    "RotaryEmbedding": dict(),
    "ShawRelativeScores": dict(head_dim=4, max_relative_position=2),
    "ShawRelativeAttention": dict(head_dim=4, value_dim=4, max_relative_position=2),
    "SinusoidalPositionEmbedding": dict(dim=6),
    "T5RelativeBias": dict(num_heads=2, num_buckets=8, max_distance=16),
    "TransformerXLScores": dict(num_heads=2, head_dim=4),
    "TUPEScores": dict(),
    "XPosEmbedding": dict(),
}

CALLS: dict[str, Callable[[np.random.Generator], Call]] = {
    "ALiBiBias": lambda rng: ((3, 3), {}),
    "AxialRotaryEmbedding": lambda rng: (
        (_normal(rng, 2, 4, 8), _ints([[0, 0], [0, 1], [1, 0], [1, 1]])), {}),
    "ConvPositionEncoding": lambda rng: ((_normal(rng, 2, 5, 4),), {}),
    "CoPEBias": lambda rng: ((_normal(rng, 2, 3, 4), _normal(rng, 2, 3, 4)), {}),
    "DebertaRelativeScores": lambda rng: ((_normal(rng, 2, 3, 4), _normal(rng, 2, 3, 4)), {}),
    "FIREBias": lambda rng: ((3, 3), {}),
    "FloaterPositionEmbedding": lambda rng: ((), {"length": 2}),
    "HierarchicalPositionEmbedding": lambda rng: ((_ints(np.arange(10)),), {}),
    "KERPLEBias": lambda rng: ((3, 3), {}),
    "LearnedPositionEmbedding": lambda rng: ((_ints([0, 2, 5]),), {}),
    "MultimodalRotaryEmbedding": lambda rng: (
        (_normal(rng, 2, 4, 8), _ints([[0, 1, 2, 3], [0, 1, 1, 2], [0, 0, 1, 1]])), {}),
    "RecurrentPositionEmbedding": lambda rng: ((), {"length": 4}),
    "RotaryEmbedding": lambda rng: ((_normal(rng, 2, 4, 8),), {}),
    "ShawRelativeScores": lambda rng: ((_normal(rng, 2, 3, 4), _normal(rng, 2, 3, 4)), {}),
    "ShawRelativeAttention": lambda rng: (
        (_normal(rng, 2, 3, 4), _normal(rng, 2, 3, 4), _normal(rng, 2, 3, 4)), {}),
    "SinusoidalPositionEmbedding": lambda rng: ((_ints(np.arange(4)),), {}),
    "T5RelativeBias": lambda rng: ((3, 4), {}),
    "TransformerXLScores": lambda rng: (
        (_normal(rng, 1, 2, 3, 4), _normal(rng, 1, 2, 5, 4), _normal(rng, 2, 6, 4)), {}),
    "TUPEScores": lambda rng: (
        (_normal(rng, 1, 2, 5, 4), _normal(rng, 1, 2, 5, 4), _normal(rng, 2, 5, 4),
         _normal(rng, 2, 5, 4)), {}),
    "XPosEmbedding": lambda rng: ((_normal(rng, 2, 4, 8),), {}),
}


def call(name: str, seed: int = 0) -> Call:
    """The call arguments of layer ``name`` drawn with a fixed seed."""
    return CALLS[name](np.random.default_rng(seed))


def named_call(name: str, seed: int = 0) -> dict[str, Any]:
    """The call arguments of layer ``name`` by parameter name (to call the function directly)."""
    import inspect

    from posenc.layers import all_layers

    args, kwargs = call(name, seed)
    bound = inspect.Signature(all_layers()[name].call_parameters()).bind(*args, **kwargs)
    return dict(bound.arguments)
