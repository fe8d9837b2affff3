"""FoPE: bad inputs on every backend; the goldens against vLLM's FourierRotaryEmbedding (its
frequency selection, cos/sin cache and forward_native, transcribed from
vllm/model_executor/layers/rotary_embedding/fope.py: vLLM is not installed here); identity
coefficients against posenc.rope."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from posenc import golden
from posenc.catalog import specs
from posenc.errors import ParameterError

X = np.linspace(-1, 1, 4 * 5 * 8).reshape(4, 5, 8)
C = np.linspace(-1, 1, 2 * 2 * 2).reshape(2, 2, 2)  # base 1e4, dim 8, L 64: M = 2


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((X, C, C), {"max_position_embeddings": 0}, r"max_position_embeddings=0 must be >= 1"),
        ((X, C, C), {"max_position_embeddings": 64.0},
         r"max_position_embeddings must be an int, got 64.0"),
        ((X, C, C), {"base": 1.0}, r"base=1.0 must be > 1"),
        ((X, C, C), {"num_inv_freq": 5, "max_position_embeddings": 64},
         r"num_inv_freq=5 exceeds x.shape\[-1\] / 2 = 4"),
        ((X, C, C), {"num_inv_freq": -1}, r"num_inv_freq=-1 must be >= 0"),
        ((X, C, C), {"max_position_embeddings": 7000},
         r"cos_coef has shape \(2, 2, 2\): it must be \[kv_heads, 4, 4\] or \[4, 4\]"),
        ((X, C, C[:1]), {"max_position_embeddings": 64},
         r"cos_coef has shape \(2, 2, 2\) but sin_coef \(1, 2, 2\)"),
        ((X[:3], C, C), {"max_position_embeddings": 64},
         r"x has shape \(3, 5, 8\) but the coefficients have 2 heads"),
        ((X[..., :7], C, C), {"max_position_embeddings": 64}, r"x.shape\[-1\]=7 is odd"),
        ((X, C[0, 0], C[0, 0]), {"max_position_embeddings": 64},
         r"cos_coef has shape \(2,\): it must be"),
        ((X, C, C, np.arange(4)), {"max_position_embeddings": 64},
         r"positions has shape \(4,\) but x has shape \(4, 5, 8\)"),
        ((X, C, C), {"rotary_dim": 10}, r"rotary_dim=10 must be even and <= x.shape\[-1\]=8"),
        ((X, C, C), {"rotary_dim": 5}, r"rotary_dim=5 must be even"),
        ((X, C, C), {"rotary_dim": 0}, r"rotary_dim=0 must be >= 2"),
        ((X, C, C), {"rotary_dim": 4, "num_inv_freq": 3},
         r"num_inv_freq=3 exceeds rotary_dim / 2 = 2"),
        ((X, C[:, :1, :1], C[:, :1, :1]), {"rotary_dim": 4, "max_position_embeddings": 7000},
         r"cos_coef has shape \(2, 1, 1\): it must be \[kv_heads, 2, 2\] .* \(2 of "
         r"rotary_dim / 2 = 2\)"),
    ],
)
def test_bad_input_raises_a_parameter_error_naming_it(pe, args, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.fope(*args, **kwargs)


def _vllm_fope(torch, positions, query, key, cos_coef, sin_coef, *, head_size, rotary_dim,
               base, max_position_embeddings, num_inv_freq, sep_head):
    """vLLM's FourierRotaryEmbedding on flat tokens (query [tokens, heads, head_size], key
    [tokens, kv_heads, head_size]) in float64, neox style: _compute_inv_freq over rotary_dim,
    the cos/sin cache padded to head_size // 2 (vLLM at 151a2c74)."""
    inv_freq = 1.0 / base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    keep = torch.ones_like(inv_freq, dtype=torch.bool)
    if num_inv_freq is not None:
        keep[num_inv_freq:] = False
    else:
        keep = inv_freq > 2.0 * torch.pi / max_position_embeddings
    inv_freq = inv_freq[keep]
    t = torch.arange(int(positions.max()) + 1, dtype=torch.float64)
    freqs = torch.outer(t, inv_freq)  # [t, D]
    if sep_head:
        sin = torch.einsum("tD,hDd->thd", freqs.sin(), sin_coef)
        cos = torch.einsum("tD,hDd->thd", freqs.cos(), cos_coef)
    else:
        sin = torch.einsum("tD,Dd->td", freqs.sin(), sin_coef)
        cos = torch.einsum("tD,Dd->td", freqs.cos(), cos_coef)
    pad = head_size // 2 - sin.shape[-1]
    sin = torch.nn.functional.pad(sin, (0, pad), value=0.0)
    cos = torch.nn.functional.pad(cos, (0, pad), value=1.0)
    sin, cos = torch.cat([sin, sin], dim=-1), torch.cat([cos, cos], dim=-1)
    cos, sin = cos[positions], sin[positions]  # [tokens, (kv,) head_size]

    def rotate_neox(x):
        return torch.cat([-x[..., head_size // 2:], x[..., : head_size // 2]], dim=-1)

    def apply(x):
        if sep_head:  # tokens x kv heads, each kv head's group of query heads beside it
            tokens, heads = x.shape[0], x.shape[1]
            kv = cos.shape[1]
            grouped = x.reshape(tokens * kv, heads // kv, head_size)
            c, s = cos.flatten(0, 1)[:, None], sin.flatten(0, 1)[:, None]
            return (grouped * c + rotate_neox(grouped) * s).reshape(x.shape)
        return x * cos[:, None] + rotate_neox(x) * sin[:, None]

    return apply(query), apply(key)


@pytest.mark.parametrize("case_name", [c.name for c in specs()["fope"].cases])
def test_oracle_vllm_fourier_rotary_embedding(case_name) -> None:
    """vLLM's forward_native, given the case's x as the key (and as every query head), returns
    the golden; the query heads of one kv head share its coefficients."""
    torch = pytest.importorskip("torch")
    spec = specs()["fope"]
    case = golden.load(spec).cases[case_name]
    p = {**{n: d["default"] for n, d in spec.parameters.items()}, **case.params}
    x, cos_coef, sin_coef = case.inputs["x"], case.inputs["cos_coef"], case.inputs["sin_coef"]
    positions = case.inputs["positions"]
    seq, dim = x.shape[-2], x.shape[-1]
    positions = np.arange(seq) if positions is None else positions
    batched = positions.ndim == 2
    rows = positions if batched else positions[None]
    sep = cos_coef.ndim == 3
    for b, row in enumerate(rows):
        xb = x[b] if batched else x
        heads = xb.reshape(-1, seq, dim)  # [heads, seq, dim]
        tokens = torch.tensor(heads).transpose(0, 1)  # [seq, heads, dim]
        query, key = _vllm_fope(
            torch, torch.tensor(row), tokens, tokens, torch.tensor(cos_coef),
            torch.tensor(sin_coef), head_size=dim, rotary_dim=p["rotary_dim"] or dim,
            base=p["base"],
            max_position_embeddings=p["max_position_embeddings"],
            num_inv_freq=p["num_inv_freq"], sep_head=sep)
        expected = (case.output[b] if batched else case.output).reshape(-1, seq, dim)
        np.testing.assert_allclose(expected, query.transpose(0, 1).numpy(), rtol=1e-9,
                                   atol=1e-9, err_msg=f"{case_name}: query")
        if not sep or heads.shape[0] == cos_coef.shape[0]:  # one key head per coefficient head
            np.testing.assert_allclose(expected, key.transpose(0, 1).numpy(), rtol=1e-9,
                                       atol=1e-9, err_msg=f"{case_name}: key")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_identity_coefficients_with_every_frequency_are_posenc_rope(dtype) -> None:
    """FoPE without extra Fourier components and without clipping is RoPE (half layout)."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3, 9, 16)).astype(dtype)
    positions = np.array([0, 1, 2, 3, 64, 4096, 65535, 1 << 20, 3])
    eye = np.eye(8, dtype=dtype)
    out = posenc.fope(x, eye, eye, positions, base=500000.0, num_inv_freq=8)
    expected = posenc.rope(x, positions, base=500000.0)
    tol = 1e-12 if dtype == "float64" else 2e-6
    np.testing.assert_allclose(out, expected, rtol=tol, atol=tol)


def test_identity_coefficients_clip_the_low_frequencies_to_zero() -> None:
    """Identity coefficients with the floor: RoPE on the kept pairs, the clipped ones unchanged
    (base 1e4, dim 8, L 63: ω_0 = 1 and ω_1 = 0.1 kept)."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((3, 6, 8))
    positions = np.array([0, 5, 17, 63, 1000, 99999])
    eye = np.eye(2)
    out = posenc.fope(x, eye, eye, positions, max_position_embeddings=63)
    # a 4-wide head with base 100 has the frequencies 1 and 0.1
    rope = posenc.rope(x[..., [0, 1, 4, 5]], positions, base=100.0)
    np.testing.assert_allclose(out[..., [0, 1, 4, 5]], rope, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(out[..., [2, 3, 6, 7]], x[..., [2, 3, 6, 7]])


def test_partial_rotary_dim_keeps_the_pairs_across_the_head() -> None:
    """rotary_dim 8 of a 16-wide head, identity coefficients, every frequency kept: pairs
    (j, j + 8) turn by base^(-2j/8) for j < 4 (RoPE with base^(-2j/16) over a head of 16 at
    base^2), and pairs 4..7 pass through; not posenc.rope's partial rotary, which rotates the
    prefix 0..7 with pairs (j, j + 4)."""
    rng = np.random.default_rng(13)
    x = rng.standard_normal((2, 5, 16))
    positions = np.array([0, 1, 7, 300, 4097])
    eye = np.eye(4)
    out = posenc.fope(x, eye, eye, positions, rotary_dim=8, num_inv_freq=4)
    kept = [0, 1, 2, 3, 8, 9, 10, 11]
    # a 8-wide head at base 1e4 has the frequencies 1e4^(-2j/8), j < 4: the same ladder
    rope = posenc.rope(x[..., kept], positions, base=10000.0)
    np.testing.assert_allclose(out[..., kept], rope, rtol=1e-12, atol=1e-12)
    passed = [4, 5, 6, 7, 12, 13, 14, 15]
    np.testing.assert_array_equal(out[..., passed], x[..., passed])
    prefix = posenc.rope(x, positions, base=10000.0, rotary_dim=8)
    assert np.abs(prefix - out).max() > 1e-2
