"""Eager torch calls reuse host-side work (frequencies, limb tensors) between calls; the
reuse must not leak state between modes, dtypes or calls."""

from __future__ import annotations

import numpy as np
import pytest

import posenc

torch = pytest.importorskip("torch")
torch_native = pytest.importorskip("posenc.backends.torch.native")


def _clear_caches() -> None:
    torch_native._limbs.cache_clear()
    torch_native._turns64.cache_clear()


def test_limbs_made_in_inference_mode_serve_autograd_later() -> None:
    _clear_caches()
    x = torch.randn(2, 7, 16, dtype=torch.float32)
    positions = torch.arange(100, 107)
    with torch.inference_mode():
        first = posenc.rope(x, positions, base=12345.0)
    xg = x.clone().requires_grad_(True)
    # float positions in the graph (e.g. learned offsets): the limbs are saved for backward
    fractional = positions.to(torch.float32).requires_grad_(True)
    out = posenc.rope(xg, fractional, base=12345.0)
    out.square().sum().backward()
    torch.testing.assert_close(out.detach(), first, rtol=0, atol=0)
    # the rotation is orthogonal: d/dx sum(rope(x)^2) = 2x
    torch.testing.assert_close(xg.grad, 2 * x, rtol=1e-5, atol=1e-5)


def test_cached_call_equals_a_cold_call() -> None:
    x = torch.randn(3, 5, 32, dtype=torch.bfloat16)
    positions = torch.tensor([0, 1, 4096, 131071, 2**24 - 1])
    warm = [posenc.rope(x, positions, base=500000.0, layout=layout)
            for layout in ("half", "interleaved")]
    _clear_caches()
    cold = [posenc.rope(x, positions, base=500000.0, layout=layout)
            for layout in ("half", "interleaved")]
    for w, c in zip(warm, cold, strict=True):
        assert torch.equal(w, c)
    # a different base is a different entry, not a stale one
    other = posenc.rope(x, positions, base=10000.0)
    assert not torch.equal(other, warm[0])
    np.testing.assert_allclose(
        other.float().numpy(),
        posenc.rope(x.double(), positions, base=10000.0).float().numpy(), rtol=0, atol=2e-2)
