"""xpos: bad inputs on every backend, the goldens against rotary-embedding-torch and a
transcription of torchscale's XPOS, and a broken backend that the centre property catches."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from posenc import golden
from posenc.backends import get_backend
from posenc.backends import numpy as pe_numpy
from posenc.catalog import specs
from posenc.conformance import Options, run
from posenc.encodings import public_functions
from posenc.errors import ParameterError
from posenc.specs import resolve_params

X = np.ones((2, 5, 8))
EPS64 = float(np.finfo(np.float64).eps)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((X,), {"kind": "value"}, r"kind='value' is not one of 'query', 'key'"),
        ((X,), {"scale_base": 0.0}, r"scale_base=0.0 must be a finite number > 0"),
        ((X,), {"scale_base": -512.0}, r"scale_base=-512.0 must be a finite number > 0"),
        ((X,), {"scale_base": float("inf")}, r"scale_base=inf must be a finite number > 0"),
        ((X,), {"scale_base": float("nan")}, r"scale_base=nan must be a finite number > 0"),
        ((X,), {"scale_base": "512"}, r"scale_base must be a number, got '512' \(str\)"),
        ((X,), {"centre": float("inf")}, r"centre=inf must be a finite number"),
        ((X,), {"centre": float("nan")}, r"centre=nan must be a finite number"),
        ((X,), {"centre": None}, r"centre must be a number, got None"),
        ((X,), {"centre": True}, r"centre must be a number, got True"),
        ((X,), {"base": 1.0}, r"base=1.0 must be > 1"),
        ((X,), {"layout": "neox"}, r"layout='neox' is not one of 'half', 'interleaved'"),
        ((X[..., :7],), {}, r"x.shape\[-1\]=7 is odd"),
        ((X,), {"rotary_dim": 5}, r"rotary_dim=5 must be even"),
        ((X,), {"rotary_dim": 10}, r"rotary_dim=10 exceeds x.shape\[-1\]=8"),
        ((X,), {"rotary_dim": 0}, r"rotary_dim=0 must be >= 2"),
        ((X[0, 0],), {}, r"x must have shape \[..., seq, dim\], got shape \(8,\)"),
        ((X, [0, 1, 2]), {}, r"positions has shape \(3,\) but x has shape \(2, 5, 8\)"),
        ((X, np.zeros((3, 5), int)), {}, r"positions has shape \(3, 5\)"),
        ((X, np.zeros(5, bool)), {}, r"positions must have an integer dtype .* bool"),
        ((X.astype(np.float32), [0, 1, 2, 3, 2**24 + 1]), {},
         r"positions contains 16777217, beyond 2\*\*24"),
        ((X.astype(int),), {}, r"x must have a real floating dtype, got int(32|64)"),
    ],
)
def test_bad_input_raises_a_parameter_error_naming_it(pe, args, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.xpos(*args, **kwargs)


def test_half_precision_positions_are_refused(pe) -> None:
    if "float16" not in pe.BACKEND.dtypes:
        pytest.skip(f"{pe.BACKEND.name} has no float16")
    with pytest.raises(ParameterError, match=r"positions must have an integer dtype .* float16"):
        pe.xpos(X, np.zeros(5, np.float16))


def test_factor_beyond_the_dtype_range_is_an_error() -> None:
    """The documented limit: 3.5 ** (|n - c| / scale_base) leaves float16 beyond ~8.9 (keys
    would be inf, queries 0), float32 beyond ~70: an error naming the reach, not inf rows."""
    x = np.ones((1, 2), np.float16)
    for kind in ("key", "query"):  # 3.5 ** (5000/512) = 2e5 > 65504
        with pytest.raises(ParameterError, match=r"\|n - centre\| = 5000 with scale_base=512"
                                                 r".* float16 range beyond \|n - centre\| = 4532"):
            pe_numpy.xpos(x, [5000], kind=kind)
    assert np.isfinite(pe_numpy.xpos(x, [5000], kind="key", centre=4500.0)).all()
    assert np.isfinite(pe_numpy.xpos(x.astype(np.float32), [5000], kind="key")).all()
    with pytest.raises(ParameterError, match=r"float32 range beyond \|n - centre\| = 36261"):
        pe_numpy.xpos(np.ones((4, 2), np.float32), kind="key", scale_base=512.0,
                      centre=-36262.0)  # no positions: arange(4) is checked too
    assert np.isfinite(pe_numpy.xpos(np.ones((1, 2)), [10**5], kind="key")).all()  # float64


def _cases() -> list[golden.GoldenCase]:
    return list(golden.load(specs()["xpos"]).cases.values())


# -- rotary-embedding-torch ---------------------------------------------------------------------


def _peer_xpos(torch: Any, x: np.ndarray, positions: np.ndarray | None, p: dict[str, Any],
               ) -> np.ndarray:
    """One golden case through rotary-embedding-torch's own pieces (float64): frequencies from
    RotaryEmbedding.forward, the xPos scale from get_scale, the rotation from apply_rotary_emb.

    get_scale(t) uses the power (t - len(t) // 2) / scale_base; passing
    t = n - c + len(t) // 2 gives (n - c) / scale_base for any positions and centre. The half
    layout is the interleaved one on permuted channels."""
    from rotary_embedding_torch import RotaryEmbedding, apply_rotary_emb

    seq, dim = x.shape[-2], x.shape[-1]
    r = dim if p["rotary_dim"] is None else p["rotary_dim"]
    pos = np.arange(seq) if positions is None else np.asarray(positions)
    freqs64 = 1.0 / p["base"] ** (np.arange(0, r, 2) / r)  # its 'lang' formula, in float64
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # its zeta buffer is built in the default dtype
    try:
        rot = RotaryEmbedding(r, custom_freqs=torch.tensor(freqs64), use_xpos=True,
                              xpos_scale_base=p["scale_base"], cache_if_possible=False)
    finally:
        torch.set_default_dtype(previous)
    flat = torch.tensor(pos.reshape(-1), dtype=torch.float64)
    freqs = rot(flat)
    scale = rot.get_scale(flat - p["centre"] + len(flat) // 2)
    if pos.ndim == 2:  # [batch, seq] against x [batch, heads..., seq, dim]
        shape = (pos.shape[0], *([1] * (x.ndim - 3)), seq, r)
        freqs, scale = freqs.reshape(shape), scale.reshape(shape)
    if p["kind"] == "key":
        scale = scale**-1
    perm = np.concatenate([np.arange(0, r, 2), np.arange(1, r, 2)])
    inverse = np.argsort(perm)
    head = x.copy()
    if p["layout"] == "half":
        head[..., :r] = x[..., :r][..., inverse]
    out = apply_rotary_emb(freqs, torch.tensor(head), scale=scale).numpy()
    if p["layout"] == "half":
        out[..., :r] = out[..., :r][..., perm]
    return out


@pytest.mark.oracle
def test_goldens_match_rotary_embedding_torch() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("rotary_embedding_torch")
    spec = specs()["xpos"]
    worst = 0.0
    for case in _cases():
        p = resolve_params(spec, case.params)
        if p["rotary_dim"] == 2 or case.inputs["x"].shape[-1] == 2:
            # RotaryEmbedding(2) divides by dim - 2 (theta_rescale_factor): see test_two_dims
            continue
        got = _peer_xpos(torch, case.inputs["x"], case.inputs.get("positions"), p)
        diff = float(np.max(np.abs(got - case.output)))
        scale = max(float(np.max(np.abs(case.output))), 1.0)
        # float64 angles n * theta carry ~eps64 * n (1.9e-9 rad at n = 2^23)
        assert diff <= (1e-12 + 4 * EPS64 * case.angle_bound) * scale, (case.name, diff)
        if case.angle_bound < 5000:
            worst = max(worst, diff / scale)
    assert worst < 1e-14  # measured: 3.4e-16 relative below position 5000


@pytest.mark.oracle
def test_rotate_queries_and_keys_matches_the_centred_cases() -> None:
    """Its public q/k entry point: positions arange(seq), centre seq // 2, interleaved; in
    float64 (custom float64 frequencies) and as shipped (float32 throughout)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("rotary_embedding_torch")
    from rotary_embedding_torch import RotaryEmbedding

    cases = golden.load(specs()["xpos"]).cases
    q_case, k_case = cases["rotary_embedding_torch_query"], cases["rotary_embedding_torch_key"]
    q, k = q_case.inputs["x"], k_case.inputs["x"]
    seq, dim = q.shape[-2], q.shape[-1]
    assert q_case.params["centre"] == k_case.params["centre"] == seq // 2
    sb = q_case.params["scale_base"]

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        freqs = torch.tensor(1.0 / 10000.0 ** (np.arange(0, dim, 2) / dim))
        rot64 = RotaryEmbedding(dim, custom_freqs=freqs, use_xpos=True, xpos_scale_base=sb)
    finally:
        torch.set_default_dtype(previous)
    rq, rk = rot64.rotate_queries_and_keys(torch.tensor(q), torch.tensor(k))
    assert np.max(np.abs(rq.numpy() - q_case.output)) < 1e-12
    assert np.max(np.abs(rk.numpy() - k_case.output)) < 1e-12

    rot32 = RotaryEmbedding(dim, use_xpos=True, xpos_scale_base=sb)
    rq, rk = rot32.rotate_queries_and_keys(torch.tensor(q, dtype=torch.float32),
                                           torch.tensor(k, dtype=torch.float32))
    for got, case in ((rq, q_case), (rk, k_case)):
        scale = float(np.max(np.abs(case.output)))
        assert np.max(np.abs(got.double().numpy() - case.output)) < 2e-6 * scale  # ~4e-7


def test_two_dims_by_hand() -> None:
    """One pair: theta_0 = 1, zeta_0 = 0.4 / 1.4 = 2/7, so a key at n (centre 0, scale_base 2)
    is 3.5 ** (n / 2) times x rotated by n radians."""
    case = golden.load(specs()["xpos"]).cases["two_dims"]
    assert case.params == {"kind": "key", "base": 10.0, "scale_base": 2.0}
    x, n = case.inputs["x"], case.inputs["positions"].astype(float)
    factor = 3.5 ** (n / 2)
    want = np.stack([x[:, 0] * np.cos(n) - x[:, 1] * np.sin(n),
                     x[:, 1] * np.cos(n) + x[:, 0] * np.sin(n)], axis=-1) * factor[:, None]
    np.testing.assert_allclose(case.output, want, rtol=1e-14, atol=1e-14)


# -- torchscale XPOS ----------------------------------------------------------------------------


def torchscale_xpos(x: np.ndarray, scale_base: float, offset: int = 0,
                    downscale: bool = False) -> np.ndarray:
    """A float64 NumPy transcription of torchscale's XPOS.forward (microsoft/torchscale,
    torchscale/component/xpos_relative_position.py, commit 776b070): x [B, length, head_dim].

    The scale runs over min_pos..max_pos with min_pos = -(length + offset) // 2, the angles
    over 0..length+offset-1 with inv_freq = 10000 ** (-j / (head_dim/2)); both keep the last
    `length` rows; sin and cos times the scale are duplicated per pair (duplicate_interleave)
    and applied with rotate_every_two (pairs (2i, 2i+1), (-x_odd, x_even))."""
    length, head_dim = x.shape[1], x.shape[2]
    min_pos = -(length + offset) // 2
    max_pos = length + offset + min_pos
    zeta = (np.arange(0, head_dim, 2) + 0.4 * head_dim) / (1.4 * head_dim)
    scale = zeta ** (np.arange(min_pos, max_pos)[:, None] / scale_base)
    half = head_dim // 2
    inv_freq = 1.0 / 10000 ** (np.arange(half) / half)
    angles = np.arange(length + offset)[:, None] * inv_freq
    sin, cos = np.sin(angles), np.cos(angles)
    scale, sin, cos = scale[-length:], sin[-length:], cos[-length:]
    if downscale:
        scale = 1 / scale
    sin, cos = np.repeat(sin * scale, 2, axis=-1), np.repeat(cos * scale, 2, axis=-1)
    rotated = np.stack([-x[..., 1::2], x[..., ::2]], axis=-1).reshape(x.shape)
    return x * cos + rotated * sin


def test_torchscale_min_pos_is_a_centre_of_ceil_half() -> None:
    for total in range(1, 12):
        assert -(total) // 2 == -((total + 1) // 2)


@pytest.mark.oracle
def test_goldens_match_torchscale_transcription() -> None:
    cases = golden.load(specs()["xpos"]).cases
    keys = cases["torchscale_keys"]
    length = keys.inputs["x"].shape[1]
    assert keys.params["centre"] == (length + 0 + 1) // 2
    got = torchscale_xpos(keys.inputs["x"], keys.params["scale_base"], 0, downscale=True)
    assert np.max(np.abs(got - keys.output)) < 1e-12
    query = cases["torchscale_decode_query"]
    offset = int(query.inputs["positions"][0])
    assert query.params["centre"] == (1 + offset + 1) // 2
    got = torchscale_xpos(query.inputs["x"], query.params["scale_base"], offset)
    assert np.max(np.abs(got - query.output)) < 1e-12


@pytest.mark.parametrize(("length", "offset"), [(1, 0), (7, 0), (8, 0), (1, 9), (4, 13)])
@pytest.mark.parametrize("downscale", [False, True])
def test_torchscale_offsets_are_reproduced_with_centre(length, offset, downscale) -> None:
    x = np.random.default_rng(length * 100 + offset).standard_normal((3, length, 16))
    want = torchscale_xpos(x, 8.0, offset, downscale)
    got = pe_numpy.xpos(x, np.arange(offset, offset + length), scale_base=8.0,
                        kind="key" if downscale else "query",
                        centre=float((length + offset + 1) // 2))
    assert np.max(np.abs(got - want)) < 1e-12


# -- a broken backend ---------------------------------------------------------------------------


def _keys_ignore_centre(x: Any, positions: Any = None, *, kind: str = "query",
                        centre: float = 0.0, **kw: Any) -> Any:
    """A port that forgets to pass the centre to the keys' scale."""
    impl = public_functions()["xpos"]
    return impl(x, positions, kind=kind, centre=centre if kind == "query" else 0.0, **kw)


def test_keys_ignoring_the_centre_fail_centre_independence() -> None:
    backend = dataclasses.replace(get_backend("numpy"), name="xpos_keys_ignore_centre",
                                  overrides={"xpos": _keys_ignore_centre})
    results = run(Options(backends=[backend], encodings=["xpos"], dtypes=["float64"],
                          modes=["eager"], max_examples=5))
    status = {r.check.name: r.status for r in results}
    centre = [n for n in status if n.startswith("xpos_centre_independence")]
    assert centre and all(status[n] == "fail" for n in centre), status
    assert status["rotary_embedding_torch_key"] == "fail"
    assert status["key_default"] == "pass"  # centre 0: the bug is invisible there


def _keys_scaled_like_queries(x: Any, positions: Any = None, *, kind: str = "query",
                              **kw: Any) -> Any:
    """A port that forgets to invert the scale for keys."""
    return public_functions()["xpos"](x, positions, kind="query", **kw)


def test_keys_scaled_like_queries_fail_relative_invariance() -> None:
    backend = dataclasses.replace(get_backend("numpy"), name="xpos_keys_like_queries",
                                  overrides={"xpos": _keys_scaled_like_queries})
    results = run(Options(backends=[backend], encodings=["xpos"], dtypes=["float64"],
                          modes=["eager"], max_examples=5))
    status = {r.check.name: r.status for r in results}
    for prefix in ("xpos_relative_invariance", "xpos_key_query_inverse", "key_default"):
        names = [n for n in status if n.startswith(prefix)]
        assert names and all(status[n] == "fail" for n in names), (prefix, status)
    assert status["query_default"] == "pass"
