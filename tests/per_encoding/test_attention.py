"""attention: bad inputs on every backend, and the goldens against torch's
scaled_dot_product_attention (an independent implementation)."""

from __future__ import annotations

import numpy as np
import pytest

from posenc import golden
from posenc.catalog import specs
from posenc.errors import ParameterError
from posenc.specs import resolve_params

Q = np.zeros((2, 3, 4))
K = np.zeros((2, 5, 4))


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((Q, K[..., :3], K), {}, r"q and k must have the same last dim, got shapes \(2, 3, 4\) "
                                 r"and \(2, 5, 3\)"),
        ((Q, K, K[:, :4]), {}, r"k and v must have the same length \(axis -2\), got shapes "
                               r"\(2, 5, 4\) and \(2, 4, 4\)"),
        ((Q, np.zeros((3, 5, 4)), K), {}, r"batch dims do not broadcast: q \(2,\), k \(3,\)"),
        ((Q[0, 0], K, K), {}, r"q must have at least 2 dims"),
        ((Q, K, K), {"bias": np.zeros((3, 4))}, r"bias has shape \(3, 4\), which does not "
                                                r"broadcast to the scores' shape \(2, 3, 5\)"),
        ((Q, K, K), {"mask": np.ones((2, 2, 3, 5), bool)}, r"mask has shape \(2, 2, 3, 5\)"),
        ((Q, K, K), {"mask": np.ones((3, 5))}, r"mask must be boolean \(True = may attend\)"),
        ((Q, K, K), {"scale": 0.0}, r"scale=0.0 must be a finite number > 0"),
        ((Q, K, K), {"scale": float("inf")}, r"scale=inf must be a finite number > 0"),
        ((Q, K, K), {"scale": "1"}, r"scale='1' must be a finite number > 0"),
        ((Q, K, K), {"scale": [1.0]}, r"scale=\[1.0\] must be a finite number > 0"),
        ((Q.astype(int), K, K), {}, r"q must have a real floating dtype"),
    ],
)
def test_bad_input_raises_a_parameter_error_naming_it(pe, args, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.attention(*args, **kwargs)


def _numpy(pe, out) -> np.ndarray:
    from posenc.backends import get_backend

    return get_backend(pe.__name__.rsplit(".", 1)[-1]).to_numpy(out)


def test_no_keys_give_zero_rows(pe) -> None:
    """k_len = 0: every query has all its (no) keys masked, so its row is zero (the documented
    convention), shape [..., q_len, d_v] in q's dtype, with or without a mask and bias."""
    q, k, v = np.ones((2, 3, 4), np.float32), np.ones((2, 0, 4), np.float32), \
        np.ones((2, 0, 5), np.float32)
    for kwargs in ({}, {"mask": np.ones((3, 0), bool)}, {"bias": np.ones((2, 3, 0), np.float32)},
                   {"scale": 0.5}):
        out = pe.attention(q, k, v, **kwargs)
        assert "float32" in str(out.dtype)
        np.testing.assert_array_equal(_numpy(pe, out), np.zeros((2, 3, 5), np.float32))


def test_zero_width_queries_need_an_explicit_scale(pe) -> None:
    """d = 0 has no default scale 1/sqrt(d): a clear error naming q's shape; with a scale the
    scores are all 0, so each query averages the values (by hand: the mean of v's rows)."""
    q, k = np.ones((3, 0)), np.ones((2, 0))
    v = np.arange(10.0).reshape(2, 5)
    with pytest.raises(ParameterError, match=r"q has shape \(3, 0\): its last dim d = 0 has no "
                                             r"default scale 1/sqrt\(d\); pass scale explicitly"):
        pe.attention(q, k, v)
    out = _numpy(pe, pe.attention(q, k, v, scale=1.0))
    np.testing.assert_allclose(out, np.broadcast_to(v.mean(axis=0), (3, 5)))


def test_mixed_dtypes() -> None:
    import posenc

    with pytest.raises(ParameterError, match="q, k and v must share one dtype, got float64, "
                                             "float32, float64"):
        posenc.attention(Q, K.astype(np.float32), K)


@pytest.mark.oracle
@pytest.mark.parametrize("name", [c.name for c in specs()["attention"].cases])
def test_golden_vs_torch_sdpa(name) -> None:
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    spec = specs()["attention"]
    case = golden.load(spec).cases[name]
    params = resolve_params(spec, case.params)
    q, k, v, bias, mask = (case.inputs[n] for n in ("q", "k", "v", "bias", "mask"))
    t = {n: None if a is None else torch.from_numpy(np.ascontiguousarray(a))
         for n, a in dict(q=q, k=k, v=v, bias=bias, mask=mask).items()}
    scores_mask = t["bias"]
    if t["mask"] is not None:  # torch takes one attn_mask: fold the boolean mask into the bias
        base = torch.zeros(t["mask"].shape, dtype=torch.float64) if scores_mask is None \
            else scores_mask
        scores_mask = base.masked_fill(~t["mask"], float("-inf"))
    out = F.scaled_dot_product_attention(t["q"], t["k"], t["v"], attn_mask=scores_mask,
                                         scale=params["scale"]).numpy()
    keep = np.ones(case.output.shape[:-1], bool)
    if mask is not None:  # torch's fully masked rows are NaN; posenc defines them as zeros
        keep = np.broadcast_to(mask.any(axis=-1), keep.shape)
        assert np.all(case.output[~keep] == 0)
    np.testing.assert_allclose(case.output[keep], out[keep], rtol=1e-12, atol=1e-12)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit, imported by inductor
def test_torch_compile_with_dynamic_lengths_and_a_static_mask() -> None:
    """Regression: once torch.compile made the lengths symbolic, a static [q_len, k_len] mask
    was wrongly rejected (``4 in (1, s0)`` is False inside dynamo)."""
    torch = pytest.importorskip("torch")
    import posenc

    def call(q, k, v, *mask):
        return posenc.attention(q, k, v, mask=mask[0] if mask else None)

    for length in (5, 3):  # the second shape makes dynamo mark the lengths dynamic
        q = torch.randn(2, 3, length, 8, dtype=torch.float64)
        torch.compile(call, fullgraph=True)(q, q, q)
    q = torch.randn(1, 2, 4, 4, dtype=torch.float64)
    mask = torch.ones(4, 4, dtype=torch.bool).tril()
    out = torch.compile(call, fullgraph=True)(q, q, q, mask)
    torch.testing.assert_close(out, posenc.attention(q, q, q, mask=mask), rtol=0, atol=1e-15)
