"""tupe: bad inputs on every backend; the goldens against two independent formulations (no pip
package implements TUPE): a transcription of the authors' code (guolinke/TUPE, fairseq) and the
fused single product [q | pos_q] [k | pos_k]ᵀ; porting bugs the harness must catch."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from posenc import golden
from posenc.catalog import specs
from posenc.errors import ParameterError
from posenc.specs import resolve_params

Q = np.zeros((2, 5, 4))
P = np.zeros((5, 4))


def _args(**changes):
    return {"q": Q, "k": Q, "pos_q": P, "pos_k": P, **changes}


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (_args(k=np.zeros((2, 5, 3))), {}, r"k has width 3 \(shape \(2, 5, 3\)\) but q has "
                                           r"width d=4"),
        (_args(pos_q=np.zeros((5, 6))), {}, r"pos_q has width 6 \(shape \(5, 6\)\) but q has "
                                            r"width d=4"),
        (_args(pos_k=np.zeros((5, 2))), {}, r"pos_k has width 2"),
        (_args(pos_q=np.zeros((4, 4))), {}, r"pos_q has 4 positions \(shape \(4, 4\)\) but "
                                            r"q_len=5: one row per token"),
        (_args(k=np.zeros((2, 7, 4))), {}, r"pos_k has 5 positions \(shape \(5, 4\)\) but "
                                           r"k_len=7"),
        (_args(bias=np.zeros((5, 4))), {}, r"bias has shape \(5, 4\), which does not broadcast "
                                           r"to \[\.\.\., q_len, k_len\] = \[\.\.\., 5, 5\]"),
        (_args(bias=np.zeros(5)), {}, r"bias must have shape \[\.\.\., q_len, k_len\], got "
                                      r"shape \(5,\)"),
        (_args(cls=np.zeros(3)), {}, r"cls has shape \(3,\): its last dim must be 2"),
        (_args(cls=np.zeros(2), k=np.zeros((2, 7, 4)), pos_k=np.zeros((7, 4))), {},
         r"cls needs self-attention with query 0 and key 0 the \[CLS\] token, but q_len=5 != "
         r"k_len=7"),
        (_args(k=np.zeros((3, 5, 4))), {}, r"batch dims do not broadcast: q \(2,\), k \(3,\)"),
        (_args(cls=np.zeros((3, 2))), {}, r"batch dims do not broadcast: q \(2,\), k \(2,\), "
                                          r"cls \(3,\)"),
        (_args(pos_q=np.zeros(4)), {}, r"pos_q must have shape \[\.\.\., q_len, d\], got shape "
                                       r"\(4,\)"),
        (_args(q=Q.astype(np.int64)), {}, r"q must have a real floating dtype"),
        (_args(), {"scale": 0.0}, r"scale=0.0 must be a finite number > 0"),
        (_args(), {"scale": -1.0}, r"scale=-1.0 must be a finite number > 0"),
    ],
)
def test_bad_input_raises_a_parameter_error_naming_it(pe, args, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.tupe(**args, **kwargs)


def test_mixed_dtypes(pe) -> None:
    args = {n: pe.BACKEND.from_numpy(a, "float32", None) for n, a in _args().items()}
    args["cls"] = pe.BACKEND.from_numpy(np.zeros(2), "float64", None)
    if args["cls"].dtype == args["q"].dtype:
        pytest.skip("this backend runs without float64 (JAX without x64)")
    with pytest.raises(ParameterError, match=r"the array inputs must share one dtype, got "
                                             r"q float32, k float32, pos_q float32, pos_k float32, "
                                             r"cls float64"):
        pe.tupe(**args)


CASES = [c.name for c in specs()["tupe"].cases]


def _load(name: str):
    spec = specs()["tupe"]
    case = golden.load(spec).cases[name]
    return case, resolve_params(spec, case.params)


def _broadcast(case):
    """The case's inputs broadcast to one batch shape (bias to [..., q_len, k_len], cls to
    [..., 2], zeros / None where absent)."""
    q, k, pq, pk, bias, cls = (case.inputs[n] for n in ("q", "k", "pos_q", "pos_k", "bias",
                                                       "cls"))
    shapes = [q.shape[:-2], k.shape[:-2], pq.shape[:-2], pk.shape[:-2]]
    shapes += [] if bias is None else [bias.shape[:-2]]
    shapes += [] if cls is None else [cls.shape[:-1]]
    batch = np.broadcast_shapes(*shapes)
    q_len, k_len = q.shape[-2], k.shape[-2]
    out = [np.broadcast_to(a, (*batch, *a.shape[-2:])) for a in (q, k, pq, pk)]
    out.append(np.zeros((*batch, q_len, k_len)) if bias is None
               else np.broadcast_to(bias, (*batch, q_len, k_len)))
    out.append(None if cls is None else np.broadcast_to(cls, (*batch, 2)))
    return batch, out


def _authors_tupe(torch, q, k, pos_q, pos_k, bias, cls, scale_factor, head_dim):
    """guolinke/TUPE, transcribed for one [batch * heads, len, d] stack: the encoder builds
    abs_pos_bias = bmm(pos_q * pos_scaling, pos_kᵀ), writes other_2_cls into column 0, then
    cls_2_other into row 0, adds the relative bias; fairseq's multi_head_attention_forward
    scales q by (head_dim * scale_factor) ** -0.5 and adds attn_bias to bmm(q, kᵀ)."""
    scaling = float(head_dim * scale_factor) ** -0.5
    t = {n: None if a is None else torch.from_numpy(np.array(a, dtype=np.float64))
         for n, a in dict(q=q, k=k, pq=pos_q, pk=pos_k, bias=bias, cls=cls).items()}
    abs_pos_bias = torch.bmm(t["pq"] * scaling, t["pk"].transpose(1, 2))
    if t["cls"] is not None:
        cls_2_other, other_2_cls = t["cls"][:, 0], t["cls"][:, 1]
        abs_pos_bias[:, :, 0] = other_2_cls.view(-1, 1)
        abs_pos_bias[:, 0, :] = cls_2_other.view(-1, 1)
    abs_pos_bias += t["bias"]
    weights = torch.bmm(t["q"] * scaling, t["k"].transpose(1, 2))
    weights += abs_pos_bias
    return weights.numpy()


@pytest.mark.parametrize("name", CASES)
def test_goldens_vs_authors_code(name) -> None:
    torch = pytest.importorskip("torch")
    case, params = _load(name)
    batch, (q, k, pq, pk, bias, cls) = _broadcast(case)
    d = q.shape[-1]
    # an explicit scale s is the authors' scaling with scale_factor = 1 / (s**2 d)
    factor = 2.0 if params["scale"] is None else 1.0 / (params["scale"] ** 2 * d)
    flat = [None if a is None else a.reshape(-1, *a.shape[len(batch):])
            for a in (q, k, pq, pk, bias, cls)]
    expected = _authors_tupe(torch, *flat, scale_factor=factor, head_dim=d)
    np.testing.assert_allclose(case.output, expected.reshape(case.output.shape), rtol=1e-12,
                               atol=1e-12)


@pytest.mark.parametrize("name", CASES)
def test_goldens_vs_fused_product(name) -> None:
    """The two correlations as one product of width 2d, [q | pos_q] [k | pos_k]ᵀ · scale, with
    the [CLS] reset applied as a rank-one correction of row 0 and column 0."""
    case, params = _load(name)
    _, (q, k, pq, pk, bias, cls) = _broadcast(case)
    d = q.shape[-1]
    scale = params["scale"] or 1 / math.sqrt(2 * d)
    fused = np.concatenate([q, pq], -1) @ np.swapaxes(np.concatenate([k, pk], -1), -1, -2)
    scores = fused * scale + bias
    if cls is not None:
        position = pq @ np.swapaxes(pk, -1, -2) * scale
        scores[..., 1:, 0] += cls[..., 1, None] - position[..., 1:, 0]
        scores[..., 0, :] += cls[..., 0, None] - position[..., 0, :]
    np.testing.assert_allclose(case.output, scores, rtol=1e-12, atol=1e-12)


def test_goldens_on_every_backend(pe) -> None:
    for case in golden.load(specs()["tupe"]).cases.values():
        inputs = {n: a for n, a in case.inputs.items() if a is not None}
        result = pe.tupe(**inputs, **case.params)
        out = pe.BACKEND.to_numpy(result).astype(np.float64)
        tol = 1e-12 if "64" in str(result.dtype) else 4e-6  # JAX without x64 runs float32
        np.testing.assert_allclose(out, case.output, rtol=tol,
                                   atol=tol * np.abs(case.output).max(), err_msg=case.name)


# -- porting bugs the harness must catch ---------------------------------------------------------

def _column_written_last(q, k, pos_q, pos_k, bias=None, cls=None, *, scale=None):
    """theta_2 written after theta_1: the [CLS] self-entry (0, 0) gets others-to-[CLS]."""
    from posenc.encodings import public_functions

    out = np.array(public_functions()["tupe"](q, k, pos_q, pos_k, bias, cls, scale=scale))
    if cls is not None:
        out[..., 0, 0] += np.asarray(cls)[..., 1] - np.asarray(cls)[..., 0]
    return out


def _bert_scale(q, k, pos_q, pos_k, bias=None, cls=None, *, scale=None):
    """BERT's 1/sqrt(d) kept when porting TUPE (the paper's sqrt(2d) forgotten)."""
    from posenc.encodings import public_functions

    return public_functions()["tupe"](q, k, pos_q, pos_k, bias, cls,
                                      scale=1 / math.sqrt(q.shape[-1]) if scale is None
                                      else scale)


@pytest.mark.parametrize(
    ("bug", "cases", "prop"),
    [
        (_column_written_last, {"tupe_a_cls", "tupe_r", "single_head_no_batch", "explicit_scale",
                                "cls_only_token", "batch_broadcast"}, "tupe_cls_untied"),
        (_bert_scale, {"tupe_a", "tupe_a_cls", "tupe_r", "single_head_no_batch",
                       "cross_lengths_with_key_bias", "cls_only_token", "batch_broadcast"},
         "tupe_content_only"),
    ],
    ids=["column_written_last", "bert_scale"],
)
def test_porting_bugs_are_caught(bug, cases, prop) -> None:
    from posenc.backends import get_backend
    from posenc.conformance import Options, run

    mutant = dataclasses.replace(get_backend("numpy"), name=bug.__name__,
                                 overrides={"tupe": bug})
    results = run(Options(backends=[mutant], encodings=["tupe"], dtypes=["float64"],
                          modes=["eager"], max_examples=4))
    failed = {r.check.name for r in results if r.failed}
    assert {n for n in failed if n in CASES} == cases
    assert prop in failed, failed
