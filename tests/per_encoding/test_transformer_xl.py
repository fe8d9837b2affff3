"""transformer_xl: bad inputs on every backend; the goldens against XLNet's own functions in
transformers (bidirectional 'bi' and causal 'uni' distances, rel_shift_bnij, rel_attn_core) and
against a transcription of the original Transformer-XL code (Transfo-XL left transformers)."""

from __future__ import annotations

import dataclasses
import math
import types

import numpy as np
import pytest

from posenc import golden
from posenc.catalog import specs
from posenc.errors import ParameterError
from posenc.specs import resolve_params

Q = np.zeros((2, 3, 4))
K = np.zeros((2, 5, 4))
W = np.zeros((6, 4))
U = np.zeros(4)


def _args(**changes):
    args = {"q": Q, "k": K, "r_proj": W, "content_bias": U, "position_bias": U}
    return {**args, **changes}


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (_args(k=K[:, :2]), {}, r"q_len=3 > k_len=2: the keys hold the memory and the current "
                                r"segment"),
        (_args(r_proj=np.zeros((5, 4))), {}, r"r_proj has d_model=5 rows \(shape \(5, 4\)\): "
                                             r"the \[sin \| cos\] table needs an even d_model"),
        (_args(r_proj=np.zeros((6, 3))), {}, r"r_proj has width 3 \(shape \(6, 3\)\) but q has "
                                             r"width d=4"),
        (_args(k=np.zeros((2, 5, 3))), {}, r"k has width 3 \(shape \(2, 5, 3\)\) but q has "
                                           r"width d=4"),
        (_args(content_bias=np.zeros(3)), {}, r"content_bias has width 3 \(shape \(3,\)\) but "
                                              r"q has width d=4"),
        (_args(position_bias=np.zeros((2, 5))), {}, r"position_bias has width 5"),
        (_args(k=np.zeros((3, 5, 4))), {}, r"batch dims do not broadcast: q \(2,\), k \(3,\)"),
        (_args(position_bias=np.zeros((3, 4))), {}, r"batch dims do not broadcast: q \(2,\), "
                                                    r"k \(2,\), position_bias \(3,\)"),
        (_args(q=np.zeros(4)), {}, r"q must have shape \[\.\.\., q_len, d\], got shape \(4,\)"),
        (_args(content_bias=np.zeros(())), {}, r"content_bias must have shape \[\.\.\., d\]"),
        (_args(q=Q.astype(np.int64)), {}, r"q must have a real floating dtype, got int"),
        (_args(), {"method": "naive"}, r"method='naive' is not one of 'rel_shift', 'gather'"),
        (_args(), {"base": 1.0}, r"base=1.0 must be > 1"),
        (_args(), {"base": -2.0}, r"base=-2.0 must be a finite number > 0"),
        (_args(), {"scale": 0.0}, r"scale=0.0 must be a finite number > 0"),
        (_args(), {"causal": "yes"}, r"causal must be a bool, got 'yes' \(str\)"),
    ],
)
def test_bad_input_raises_a_parameter_error_naming_it(pe, args, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.transformer_xl(**args, **kwargs)


def test_mixed_dtypes(pe) -> None:
    args = {n: pe.BACKEND.from_numpy(a, "float32", None) for n, a in _args().items()}
    args["k"] = pe.BACKEND.from_numpy(K, "float64", None)
    if args["k"].dtype == args["q"].dtype:
        pytest.skip("this backend runs without float64 (JAX without x64)")
    with pytest.raises(ParameterError, match=r"must share one dtype, got q float32, k float64, "
                                             r"r_proj float32, content_bias float32"):
        pe.transformer_xl(**args)


def _cases(causal: bool) -> list[str]:
    spec = specs()["transformer_xl"]
    return [c.name for c in spec.cases if resolve_params(spec, c.params)["causal"] == causal]


def _load(name: str):
    spec = specs()["transformer_xl"]
    case = golden.load(spec).cases[name]
    return case, resolve_params(spec, case.params)


def _per_batch(case):
    """Yield (batch index, q, k, r_proj, u, v) per element of the broadcast batch shape."""
    q, k, w, u, v = (case.inputs[n] for n in ("q", "k", "r_proj", "content_bias",
                                              "position_bias"))
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], w.shape[:-2], u.shape[:-1],
                                v.shape[:-1])
    q, k, w = (np.broadcast_to(a, (*batch, *a.shape[-2:])) for a in (q, k, w))
    u, v = (np.broadcast_to(a, (*batch, a.shape[-1])) for a in (u, v))
    for idx in np.ndindex(*batch):
        yield idx, q[idx], k[idx], w[idx], u[idx], v[idx]


def test_goldens_on_every_backend(pe) -> None:
    """Each golden, in float64, on the finite entries with a finite scale, and -inf exactly on
    the masked ones (the harness scales tolerances by the largest |expected|, which the -inf
    entries of a causal golden make infinite)."""
    spec = specs()["transformer_xl"]
    for case in golden.load(spec).cases.values():
        result = pe.transformer_xl(**case.inputs, **case.params)
        out = pe.BACKEND.to_numpy(result).astype(np.float64)
        finite = np.isfinite(case.output)
        assert np.array_equal(np.isfinite(out), finite), case.name
        assert np.all(out[~finite] == -np.inf), case.name
        # float64, or float32 where JAX runs without x64
        tol = 1e-12 if "64" in str(result.dtype) else 4e-6
        magnitude = np.abs(case.output[finite]).max()
        np.testing.assert_allclose(out[finite], case.output[finite], rtol=tol,
                                   atol=tol * magnitude, err_msg=case.name)


def test_reference_relative_rows_are_the_concat_sinusoidal_table() -> None:
    """R_t is Transformer-XL's PositionalEmbedding, i.e. posenc's sinusoidal layout='concat'."""
    from posenc.reference.sinusoidal import sinusoidal
    from posenc.reference.transformer_xl import relative_row

    table = sinusoidal(np.arange(-5, 12), 8, base=10000.0, layout="concat", padding_idx=None)
    rows = np.stack([relative_row(t, 8, 10000.0) for t in range(-5, 12)])
    np.testing.assert_array_equal(rows, table)


# -- oracle: transformers' XLNet --------------------------------------------------------------

def _xlnet_scores(torch, xlnet, q, k, w, u, v, *, attn_type: str, base: float, scale: float):
    """Scores [q_len, k_len] from XLNet's functions: its distance sequence (beg, end) for
    attn_type, positional_embedding, the einsums of rel_attn_core and rel_shift_bnij."""
    q_len, k_len, d = q.shape[0], k.shape[0], q.shape[1]
    d_model = w.shape[0]
    beg, end = {"bi": (k_len, -q_len), "uni": (k_len, -1)}[attn_type]
    pos_seq = torch.arange(beg, end, -1.0, dtype=torch.float64)
    inv_freq = 1 / torch.pow(base, torch.arange(0, d_model, 2.0, dtype=torch.float64) / d_model)
    pos_emb = xlnet.XLNetModel.positional_embedding(pos_seq, inv_freq, 1)  # [rlen, 1, d_model]
    r = torch.from_numpy(np.array(w))[:, None, :]  # [d_model, n_head=1, d_head]
    k_head_r = torch.einsum("ibh,hnd->ibnd", pos_emb, r)
    q_head = torch.from_numpy(np.array(q))[:, None, None, :]  # [i, b, n, d]
    k_head = torch.from_numpy(np.array(k))[:, None, None, :]
    r_w_bias = torch.from_numpy(np.array(u))[None]  # [n_head, d_head]
    r_r_bias = torch.from_numpy(np.array(v))[None]
    ac = torch.einsum("ibnd,jbnd->bnij", q_head + r_w_bias, k_head)
    bd = torch.einsum("ibnd,jbnd->bnij", q_head + r_r_bias, k_head_r)
    bd = xlnet.XLNetRelativeAttention.rel_shift_bnij(bd, klen=k_len)
    assert d == w.shape[1]
    return ((ac + bd) * scale)[0, 0].numpy(), (q_head, k_head, k_head_r, r_w_bias, r_r_bias)


@pytest.mark.oracle
@pytest.mark.parametrize("name", _cases(causal=False))
def test_bidirectional_goldens_vs_xlnet(name) -> None:
    """XLNet's attn_type='bi' (pos_seq arange(klen, -qlen, -1), rel_shift_bnij) gives every
    entry of a causal=False golden; rel_attn_core's probabilities are their softmax."""
    torch = pytest.importorskip("torch")
    xlnet = pytest.importorskip("transformers.models.xlnet.modeling_xlnet")
    case, params = _load(name)
    d = case.inputs["q"].shape[-1]
    scale = params["scale"] or 1 / math.sqrt(d)
    config = xlnet.XLNetConfig(d_model=d, n_head=1, d_head=d, dropout=0.0)
    attn = xlnet.XLNetRelativeAttention(config).double().eval()
    attn.scale = scale
    with torch.no_grad():
        for idx, q, k, w, u, v in _per_batch(case):
            scores, (q_head, k_head, k_head_r, r_w, r_r) = _xlnet_scores(
                torch, xlnet, q, k, w, u, v, attn_type="bi", base=params["base"], scale=scale)
            expected = case.output[idx]
            np.testing.assert_allclose(expected, scores, rtol=1e-12, atol=1e-12)
            attn.r_w_bias.copy_(r_w)
            attn.r_r_bias.copy_(r_r)
            _, prob = attn.rel_attn_core(q_head, k_head, k_head, k_head_r, seg_mat=None,
                                         attn_mask=None, output_attentions=True)
            softmax = np.exp(expected - expected.max(axis=-1, keepdims=True))
            softmax /= softmax.sum(axis=-1, keepdims=True)
            np.testing.assert_allclose(prob[:, :, 0, 0].numpy(), softmax, rtol=1e-12,
                                       atol=1e-14)


@pytest.mark.oracle
@pytest.mark.parametrize("name", _cases(causal=True))
def test_causal_goldens_vs_xlnet_uni(name) -> None:
    """XLNet's attn_type='uni' distances (arange(klen, -1, -1)) through rel_shift_bnij give the
    kept entries of every causal golden (the rest is what its attention mask removes)."""
    torch = pytest.importorskip("torch")
    xlnet = pytest.importorskip("transformers.models.xlnet.modeling_xlnet")
    case, params = _load(name)
    scale = params["scale"] or 1 / math.sqrt(case.inputs["q"].shape[-1])
    for idx, q, k, w, u, v in _per_batch(case):
        scores, _ = _xlnet_scores(torch, xlnet, q, k, w, u, v, attn_type="uni",
                                  base=params["base"], scale=scale)
        kept = np.isfinite(case.output[idx])
        q_len, k_len = q.shape[0], k.shape[0]
        assert kept.sum() == sum(k_len - q_len + r + 1 for r in range(q_len))  # j <= i kept
        np.testing.assert_allclose(case.output[idx][kept], scores[kept], rtol=1e-12,
                                   atol=1e-12)


@pytest.mark.oracle
def test_xlnet_relative_positional_encoding_is_the_distance_table() -> None:
    """XLNetModel.relative_positional_encoding itself (float32 frequencies) against the
    reference's rows: 'bi' holds distances klen .. -(qlen-1), 'uni' klen .. 0."""
    pytest.importorskip("torch")
    xlnet = pytest.importorskip("transformers.models.xlnet.modeling_xlnet")
    from posenc.reference.transformer_xl import relative_row

    q_len, k_len, d_model = 3, 7, 8
    for attn_type, low in (("bi", 1 - q_len), ("uni", 0)):
        model = types.SimpleNamespace(d_model=d_model, attn_type=attn_type, bi_data=False,
                                      clamp_len=-1,
                                      positional_embedding=xlnet.XLNetModel.positional_embedding)
        table = xlnet.XLNetModel.relative_positional_encoding(model, q_len, k_len)[:, 0]
        rows = np.stack([relative_row(t, d_model, 10000.0) for t in range(k_len, low - 1, -1)])
        np.testing.assert_allclose(table.double().numpy(), rows, rtol=0, atol=1e-6)


# -- a transcription of the original Transformer-XL (kimiyoung/transformer-xl) ----------------

def _original_transformer_xl(torch, q, k, w, u, v, *, base: float, scale: float):
    """RelPartialLearnableMultiHeadAttn's scores, transcribed from pytorch/mem_transformer.py:
    pos_seq = arange(klen-1, -1, -1.0), PositionalEmbedding (cat[sin, cos]), AC and BD einsums,
    _rel_shift (zero pad, view, drop a row), dec_attn_mask = triu(ones, 1 + mlen) -> -inf."""
    q_len, k_len = q.shape[0], k.shape[0]
    d_model = w.shape[0]
    m_len = k_len - q_len
    inv_freq = 1 / (base ** (torch.arange(0.0, d_model, 2.0, dtype=torch.float64) / d_model))
    pos_seq = torch.arange(k_len - 1, -1, -1.0, dtype=torch.float64)
    sinusoid_inp = torch.outer(pos_seq, inv_freq)
    pos_emb = torch.cat([sinusoid_inp.sin(), sinusoid_inp.cos()], dim=-1)  # [rlen, d_model]
    t = {n: torch.from_numpy(np.array(a)) for n, a in dict(q=q, k=k, w=w, u=u, v=v).items()}
    r_head_k = (pos_emb @ t["w"])[:, None, :]  # r_net(r): [rlen, n_head=1, d_head]
    w_head_q = t["q"][:, None, None, :]  # [qlen, bsz=1, n_head=1, d_head]
    w_head_k = t["k"][:, None, None, :]
    ac = torch.einsum("ibnd,jbnd->ijbn", w_head_q + t["u"], w_head_k)
    bd = torch.einsum("ibnd,jnd->ijbn", w_head_q + t["v"], r_head_k)
    zero_pad = torch.zeros((bd.size(0), 1, *bd.size()[2:]), dtype=bd.dtype)
    padded = torch.cat([zero_pad, bd], dim=1).view(bd.size(1) + 1, bd.size(0), *bd.size()[2:])
    bd = padded[1:].view_as(bd)
    score = (ac + bd) * scale
    mask = torch.triu(torch.ones(q_len, k_len), diagonal=1 + m_len).bool()
    return score.masked_fill(mask[:, :, None, None], -float("inf"))[:, :, 0, 0].numpy()


@pytest.mark.parametrize("name", _cases(causal=True))
def test_causal_goldens_vs_original_transformer_xl(name) -> None:
    torch = pytest.importorskip("torch")
    case, params = _load(name)
    scale = params["scale"] or 1 / math.sqrt(case.inputs["q"].shape[-1])
    for idx, q, k, w, u, v in _per_batch(case):
        expected = _original_transformer_xl(torch, q, k, w, u, v, base=params["base"],
                                            scale=scale)
        np.testing.assert_allclose(case.output[idx], expected, rtol=1e-12, atol=1e-12)


# -- the harness catches the classic porting bug ------------------------------------------------

def _causal_shift_everywhere(q, k, r_proj, content_bias, position_bias, *, causal=True,
                             method="rel_shift", base=10000.0, scale=None):
    """Transformer-XL's rel-shift over distances k_len-1 .. 0 reused for XLNet's bidirectional
    attention: the entries above the diagonal silently read the pad and the next row."""
    from posenc.encodings import public_functions

    if causal or method != "rel_shift":
        return public_functions()["transformer_xl"](
            q, k, r_proj, content_bias, position_bias, causal=causal, method=method, base=base,
            scale=scale)
    q_len, k_len, d = q.shape[-2], k.shape[-2], q.shape[-1]
    d_model = r_proj.shape[-2]
    freqs = base ** (-2.0 * np.arange(d_model // 2) / d_model)
    angles = np.arange(k_len - 1, -1, -1)[:, None] * freqs
    table = np.concatenate([np.sin(angles), np.cos(angles)], axis=-1)
    bd = (q + position_bias[..., None, :]) @ np.swapaxes(table @ r_proj, -1, -2)
    lead = bd.shape[:-2]
    padded = np.concatenate([np.zeros((*lead, q_len, 1)), bd], axis=-1)
    bd = padded.reshape(*lead, -1)[..., q_len:].reshape(*lead, q_len, k_len)
    ac = (q + content_bias[..., None, :]) @ np.swapaxes(k, -1, -2)
    return (ac + bd) * (scale or 1 / math.sqrt(d))


def test_causal_rel_shift_reused_bidirectionally_is_caught() -> None:
    from posenc.backends import get_backend
    from posenc.conformance import Options, run

    mutant = dataclasses.replace(get_backend("numpy"), name="causal_shift_everywhere",
                                 overrides={"transformer_xl": _causal_shift_everywhere})
    options = Options(backends=[mutant], encodings=["transformer_xl"], dtypes=["float64"],
                      modes=["eager"], max_examples=4)
    results = run(options)
    cases = {r.check.name for r in results if r.failed and r.check.kind == "case"}
    properties = {r.check.name for r in results if r.failed and r.check.kind == "property"}
    # the goldens of the bidirectional rel-shift cases, and nothing causal or gathered
    assert cases == {"bidirectional_with_memory", "bidirectional_self", "bidirectional_long"}
    assert "transformer_xl_rel_shift_matches_gather[causal=False]" in properties, properties
