"""Torch eager rotations that write their halves into new tensors (backends/torch/native.py
``_rotate_into_new``, backends/torch/rotary_embedding.py ``_fills_new_tensors``): against a
float64 transcription of the rotation at sizes on both sides of the switch, for strided q,
batched positions and partial rotary; gradients still reach inputs that require them (autograd,
torch.func.grad) and vmap over q or over the positions still works."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import posenc  # noqa: E402
from posenc.backends.torch import RotaryEmbedding  # noqa: E402

SMALL, LARGE = (2, 2, 5, 32), (2, 8, 300, 64)  # LARGE is past the module's 2^16 elements


def expected(x: torch.Tensor, positions: torch.Tensor, layout: str, rd: int) -> torch.Tensor:
    """x rotated in float64: pair (i, i + rd/2) or (2i, 2i + 1) by p * 10000^(-2i/rd)."""
    inv = 10000.0 ** (-torch.arange(0, rd, 2, dtype=torch.float64) / rd)
    angles = positions.double()[..., None] * inv
    if positions.ndim == 2:
        angles = angles.view(angles.shape[0], *[1] * (x.ndim - 3), *angles.shape[1:])
    cos, sin = angles.cos(), angles.sin()
    head, tail = x.double()[..., :rd], x.double()[..., rd:]
    if layout == "half":
        a, b = head[..., : rd // 2], head[..., rd // 2:]
        rotated = torch.cat([a * cos - b * sin, b * cos + a * sin], -1)
    else:
        a, b = head[..., 0::2], head[..., 1::2]
        rotated = torch.stack([a * cos - b * sin, b * cos + a * sin], -1).flatten(-2)
    return torch.cat([rotated, tail], -1)


def rotations(layout: str, rd: int, dim: int) -> dict:
    table = RotaryEmbedding(dim, layout=layout, rotary_dim=rd, max_positions=2048)
    plain = RotaryEmbedding(dim, layout=layout, rotary_dim=rd)
    return {"rope": lambda x, p: posenc.rope(x, p, layout=layout, rotary_dim=rd),
            "module-table": table, "module-exact": plain}


def inputs(shape: tuple, dtype: torch.dtype) -> tuple:
    b, h, s, d = shape
    q = torch.randn(b, s, h, d, generator=torch.Generator().manual_seed(5)).to(dtype)
    positions = torch.stack([torch.arange(s) + 3, torch.arange(s) * 5 + 40])
    return q.transpose(1, 2), positions  # q strided: [b, h, s, d] over [b, s, h, d] memory


@pytest.mark.parametrize("shape", [SMALL, LARGE], ids=["small", "large"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotation_matches_float64(shape: tuple, layout: str, dtype: torch.dtype) -> None:
    q, positions = inputs(shape, dtype)
    tol = 2e-6 if dtype == torch.float32 else 2e-2
    for rd in (shape[-1], shape[-1] // 2):
        for name, rotate in rotations(layout, rd, shape[-1]).items():
            for p in (positions[0], positions):
                got = rotate(q, p)
                assert got.dtype == dtype and got.shape == q.shape, name
                torch.testing.assert_close(got.double(), expected(q, p, layout, rd),
                                           atol=tol, rtol=tol, msg=f"{name} rd={rd}")
            k = q[:, :1].contiguous()
            if name != "rope":
                got_q, got_k = rotate(q, positions, k=k)
                torch.testing.assert_close(got_q, rotate(q, positions), atol=0, rtol=0)
                torch.testing.assert_close(got_k.double(), expected(k, positions, layout, rd),
                                           atol=tol, rtol=tol, msg=f"{name} k")


@pytest.mark.parametrize("shape", [SMALL, LARGE], ids=["small", "large"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_gradients_reach_inputs(shape: tuple, layout: str) -> None:
    q, positions = inputs(shape, torch.float32)
    grad_out = torch.randn(q.shape, generator=torch.Generator().manual_seed(6))
    for name, rotate in rotations(layout, shape[-1], shape[-1]).items():
        x = q.detach().clone().requires_grad_(True)
        rotate(x, positions).backward(grad_out)
        # the rotation is orthogonal, so its gradient is the inverse rotation of grad_out
        assert x.grad is not None, name
        torch.testing.assert_close(x.grad.double(), expected(grad_out, -positions, layout,
                                                             shape[-1]), atol=2e-6, rtol=2e-6)
        functional = torch.func.grad(lambda x, r=rotate: (r(x, positions) * grad_out).sum())
        torch.testing.assert_close(functional(q), x.grad, atol=2e-6, rtol=2e-6, msg=name)


@pytest.mark.parametrize("shape", [SMALL, LARGE], ids=["small", "large"])
def test_vmap_over_q_and_over_positions(shape: tuple) -> None:
    q, positions = inputs(shape, torch.float32)
    for name, rotate in rotations("half", shape[-1], shape[-1]).items():
        over_q = torch.vmap(lambda x, r=rotate: r(x, positions[0]))(q)
        torch.testing.assert_close(over_q.double(), expected(q, positions[0], "half",
                                                             shape[-1]), atol=2e-6, rtol=2e-6)
        # every path, the per-call ones too: their range check skips batched positions, whose
        # values the host cannot read (as under torch.compile)
        over_p = torch.vmap(lambda p, r=rotate: r(q[0], p))(positions)
        for i in range(len(positions)):
            torch.testing.assert_close(over_p[i].double(),
                                       expected(q[0], positions[i], "half", shape[-1]),
                                       atol=2e-6, rtol=2e-6, msg=name)
