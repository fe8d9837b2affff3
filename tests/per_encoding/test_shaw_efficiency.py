"""shaw_attention's memory use and cost: no [q_len, k_len, d] tensor, only the reachable rows
of a huge table, and one torch.compile graph for changing lengths."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest


def test_no_query_key_dim_tensor_is_built() -> None:
    """A [q_len, k_len, d] tensor of float64 would be 32 MiB here; shaw_attention's peak
    allocation must stay a few [q_len, k_len] arrays (0.5 MiB each)."""
    import posenc

    rng = np.random.default_rng(3)
    n, d, K = 256, 64, 16
    q, k, v = (rng.standard_normal((n, d)) for _ in range(3))
    table_k, table_v = rng.standard_normal((2 * K + 1, d)), rng.standard_normal((2 * K + 1, d))
    posenc.shaw_attention(q, k, v, table_k, table_v, max_relative_position=K)  # warm up
    tracemalloc.start()
    try:
        posenc.shaw_attention(q, k, v, table_k, table_v, max_relative_position=K)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, f"peak {peak / 2**20:.1f} MiB"


def test_huge_k_costs_only_the_reachable_rows() -> None:
    """K far beyond the sequence clips nothing: the result equals K = k_len - 1 with the
    matching middle rows of the table."""
    import posenc

    rng = np.random.default_rng(5)
    q, k, v = rng.standard_normal((3, 4)), rng.standard_normal((5, 4)), rng.standard_normal((5, 2))
    big, small = 1000, 4
    table_k, table_v = rng.standard_normal((2 * big + 1, 4)), rng.standard_normal((2 * big + 1, 2))
    middle = slice(big - small, big + small + 1)
    np.testing.assert_allclose(
        posenc.shaw_attention(q, k, v, table_k, table_v, max_relative_position=big),
        posenc.shaw_attention(q, k, v, table_k[middle], table_v[middle],
                              max_relative_position=small), rtol=1e-14, atol=1e-14)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit, imported by inductor
def test_torch_compile_fullgraph_with_dynamic_lengths() -> None:
    """The effective K (min(K, k_len - 1)) and the table slice must trace once the lengths
    are symbolic."""
    torch = pytest.importorskip("torch")
    import posenc

    def call(q, k, v, tk, tv, mask):
        return posenc.shaw_attention(q, k, v, tk, tv, max_relative_position=3, mask=mask)

    compiled = torch.compile(call, fullgraph=True)
    tk, tv = torch.randn(7, 4, dtype=torch.float64), torch.randn(7, 4, dtype=torch.float64)
    for q_len, k_len in ((5, 5), (3, 8), (2, 2)):  # the second call makes the lengths dynamic
        q = torch.randn(2, q_len, 4, dtype=torch.float64)
        k, v = (torch.randn(2, k_len, 4, dtype=torch.float64) for _ in range(2))
        mask = torch.rand(q_len, k_len) < 0.7
        torch.testing.assert_close(compiled(q, k, v, tk, tv, mask), call(q, k, v, tk, tv, mask),
                                   rtol=0, atol=1e-13)
