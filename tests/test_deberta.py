"""deberta_bucket / deberta_scores: bad inputs on every backend, bucket tables worked out by hand
from the formula, the goldens against transformers' DeBERTa-v2 (make_log_bucket_position,
build_relative_position, DisentangledSelfAttention.disentangled_attention_bias) including the
documented float32 ties, torch.compile, and broken implementations the harness must catch."""

from __future__ import annotations

import contextlib
import dataclasses
import math

import numpy as np
import pytest

# torch before any TensorFlow import (transformers may pull TensorFlow in)
with contextlib.suppress(ImportError):
    import torch  # noqa: F401

from posenc import golden
from posenc.backends import get_backend
from posenc.catalog import specs
from posenc.conformance import Options, run
from posenc.encodings import public_functions
from posenc.errors import ParameterError, PositionOutOfRangeError
from posenc.specs import resolve_params

REL = np.arange(-5, 6)
Q = np.zeros((2, 3, 4))
K = np.zeros((2, 5, 4))
T16 = np.zeros((16, 4))  # 2·span rows for position_buckets=8
SMALL = {"position_buckets": 8, "max_relative_positions": 12}


# -- bad inputs ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bucket_size": 7}, r"bucket_size=7 must be an even integer >= 2"),
        ({"bucket_size": 0}, r"bucket_size=0 must be an even integer >= 2"),
        ({"bucket_size": -4}, r"bucket_size=-4 must be an even integer >= 2"),
        ({"bucket_size": 256.0}, r"bucket_size must be an int, got 256.0 \(float\)"),
        ({"bucket_size": True}, r"bucket_size must be an int, got True \(bool\)"),
        ({"max_position": 129}, r"max_position=129 must be >= bucket_size/2 \+ 2 = 130: the "
                                r"bucket divides by ln\(\(max_position − 1\)/\(bucket_size/2\)\)"),
        ({"bucket_size": 8, "max_position": 4}, r"max_position=4 must be >= bucket_size/2 \+ 2 = 6"),
        ({"max_position": "512"}, r"max_position must be an int, got '512' \(str\)"),
        ({"clamp": "microsoft"}, r"clamp='microsoft' is not one of 'transformers', 'original'"),
        ({"clamp": None}, r"clamp=None is not one of 'transformers', 'original'"),
    ],
)
def test_bucket_bad_parameters(pe, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.deberta_bucket(REL, **kwargs)


@pytest.mark.parametrize(
    ("rel", "message"),
    [
        (np.array([1.0, -2.0]), r"relative_position must have a signed integer dtype \(query − "
                                r"key distances\), got float(64|32)"),
        (np.array([True, False]), r"relative_position must have a signed integer dtype .*, "
                                  r"got bool"),
    ],
)
def test_bucket_non_integer_positions(pe, rel, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.deberta_bucket(rel)


def test_bucket_range_is_checked_in_eager_mode() -> None:
    """Distances are exact up to 2**31 − 1; beyond, and for the dtype's minimum (whose
    magnitude is not representable), an eager call raises instead of returning a wrong bucket.
    With clamp='original' every distance is clamped first and fine."""
    import posenc

    # x = 127·ln((2^31 − 1)/128)/ln(511/128) = 127·16.6356/1.38434 = 1526.2: bucket 128 + 1527
    ok = np.array([-(2**31 - 1), 2**31 - 1])
    np.testing.assert_array_equal(posenc.deberta_bucket(ok), [-1655, 1655])
    with pytest.raises(PositionOutOfRangeError, match=r"relative_position contains 2147483648, "
                                                      r"outside the valid range \[-2147483647, "
                                                      r"2147483648\)"):
        posenc.deberta_bucket(np.array([0, 2**31]))
    with pytest.raises(PositionOutOfRangeError, match=r"relative_position contains -128"):
        posenc.deberta_bucket(np.array([-128, 5], np.int8), bucket_size=8, max_position=16)
    far = np.array([-(2**62), 2**62])
    np.testing.assert_array_equal(posenc.deberta_bucket(far, clamp="original"), [-255, 255])
    # a degenerate configuration: ratio 34/33, 4096 log buckets are reached at |r| = 1507
    with pytest.raises(PositionOutOfRangeError, match=r"contains -1600, outside the valid range "
                                                      r"\[-1506, 1507\)"):
        posenc.deberta_bucket(np.array([-1600]), bucket_size=66, max_position=35)


def _native(pe, values: np.ndarray, dtype: str):
    """``values`` as a ``dtype`` array of pe's framework (skipped where it has none), passed to
    posenc's functions directly (pe's functions convert NumPy integers to the index dtype)."""
    backend = get_backend(pe.__name__.rsplit(".", 1)[-1])
    out = backend.from_numpy(values, dtype, None)
    if not np.array_equal(backend.to_numpy(out), values) or dtype not in str(out.dtype):
        pytest.skip(f"{backend.name} holds no {dtype} array here")
    return backend, out


@pytest.mark.parametrize("dtype", ["int8", "int16"])
@pytest.mark.parametrize(("bucket_size", "max_position", "clamp"),
                         [(256, 512, "transformers"), (8, 16, "transformers"),
                          (64, 512, "original"), (32, 100, "transformers")])
def test_bucket_narrow_integers_match_the_reference(pe, dtype, bucket_size, max_position,
                                                    clamp) -> None:
    """int8/int16 distances get the buckets of the same distances in Python integers (the
    NumPy reference): mid + count and the comparison with mid must not wrap in the narrow dtype."""
    import posenc
    from posenc.reference import deberta as reference

    top = np.iinfo(dtype).max
    values = np.unique(np.concatenate([np.arange(-130, 131), [-top, -top + 1, top - 1, top]])
                       .clip(-top, top)).astype(dtype)
    backend, rel = _native(pe, values, dtype)
    out = posenc.deberta_bucket(rel, bucket_size=bucket_size, max_position=max_position,
                                clamp=clamp)
    assert dtype in str(out.dtype)
    expected = reference.deberta_bucket(values, bucket_size=bucket_size,
                                        max_position=max_position, clamp=clamp)
    np.testing.assert_array_equal(backend.to_numpy(out), expected)


def test_bucket_beyond_the_dtype_is_refused(pe) -> None:
    """A configuration whose buckets outgrow int8 (|r| = 127 is bucket 2479 here) is refused
    for int8 distances, naming the parameters and the dtype, instead of wrapping."""
    import posenc
    from posenc.reference import deberta as reference

    assert reference.bucket(127, 200, 102, "transformers") > 127
    _, rel = _native(pe, np.array([1, -1], np.int8), "int8")
    with pytest.raises(ParameterError, match=r"bucket_size=200 and max_position=102 \(clamp="
                                             r"'transformers'\) give buckets up to ±\d+ for int8 "
                                             r"relative positions, beyond the int8 range"):
        posenc.deberta_bucket(rel, bucket_size=200, max_position=102)
    # clamped to ±101 first, the buckets stay within ±199: still beyond int8
    with pytest.raises(ParameterError, match=r"clamp='original'\) give buckets up to ±199 for "
                                             r"int8"):
        posenc.deberta_bucket(rel, bucket_size=200, max_position=102, clamp="original")


def test_scores_zero_width_queries_need_an_explicit_scale(pe) -> None:
    q, k = np.ones((3, 0)), np.ones((2, 0))
    with pytest.raises(ParameterError, match=r"q has shape \(3, 0\): its last dim d = 0 has no "
                                             r"default scale"):
        pe.deberta_scores(q, k)
    out = get_backend(pe.__name__.rsplit(".", 1)[-1]).to_numpy(pe.deberta_scores(q, k, scale=1.0))
    np.testing.assert_array_equal(out, np.zeros((3, 2)))  # empty dot products


def test_bucket_traced_dtype_minimum_gets_the_last_bucket() -> None:
    """Inside jax.jit the range cannot be checked: the int32 minimum, whose magnitude int32 does
    not hold, gets the last bucket of the table (that of −(2**31 − 1)), not a wrapped value."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    import posenc

    edge = np.array([-(2**31) + 1, 2**31 - 1], np.int64)
    expected = np.asarray(posenc.deberta_bucket(edge))  # eager, in int64
    rel = jnp.asarray(np.array([-(2**31), 2**31 - 1]), dtype=jnp.int32)
    out = jax.jit(posenc.deberta_bucket)(rel)
    assert out.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(out), expected)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((Q, K, np.zeros((15, 4))), {}, r"rel_k has shape \(15, 4\): expected 2·span = 16 rows "
                                        r"\(axis -2\) for position_buckets=8"),
        ((Q, K, None, np.zeros((2, 12, 4))), {}, r"rel_q has shape \(2, 12, 4\): expected 2·span "
                                                 r"= 16 rows"),
        ((Q, K, np.zeros((16, 4))), {"position_buckets": 0, "max_relative_positions": 4},
         r"rel_k has shape \(16, 4\): expected 2·span = 8 rows \(axis -2\) for "
         r"max_relative_positions=4 \(position_buckets=0 <= 0\)"),
        ((Q, K, np.zeros((16, 3))), {}, r"q, k and the relative tables must share the last dim "
                                        r"d, got shapes q \(2, 3, 4\), k \(2, 5, 4\), rel_k "
                                        r"\(16, 3\)"),
        ((Q, K[..., :3]), {}, r"must share the last dim d, got shapes q \(2, 3, 4\), k \(2, 5, 3\)"),
        ((Q, np.zeros((3, 5, 4)), T16), {}, r"batch dims do not broadcast: q \(2,\), k \(3,\)"),
        ((Q, K, np.zeros((3, 16, 4))), {}, r"batch dims do not broadcast: q \(2,\), k "
                                           r"\(2,\), rel_k \(3,\): the last batch dim differs"),
        ((Q[0, 0], K, T16), {}, r"q must have at least 2 dims \[..., rows, d\], got shape \(4,\)"),
        ((Q, K, T16[0]), {}, r"rel_k must have at least 2 dims"),
        ((Q.astype(int), K, T16), {}, r"q must have a real floating dtype, got int(64|32)"),
        ((Q, K, T16.astype(int)), {}, r"rel_k must have a real floating dtype, got int(64|32)"),
        ((Q, K, T16), {"position_buckets": 7}, r"position_buckets=7 must be an even integer >= 2"),
        ((Q, K, T16), {"max_relative_positions": 5},
         r"max_relative_positions=5 must be >= position_buckets/2 \+ 2 = 6"),
        ((Q, K, T16), {"position_buckets": -1, "max_relative_positions": 0},
         r"max_relative_positions=0 must be >= 1"),
        ((Q, K, T16), {"position_buckets": 8.0}, r"position_buckets must be an int, got 8.0"),
        ((Q, K, T16), {"clamp": "clip"}, r"clamp='clip' is not one of 'transformers', 'original'"),
        ((Q, K, T16), {"scale": 0.0}, r"scale=0.0 must be a finite number > 0 \(or None\)"),
        ((Q, K, T16), {"scale": float("nan")}, r"scale=nan must be a finite number > 0"),
        ((Q, K, T16), {"scale": True}, r"scale=True must be a finite number > 0"),
    ],
)
def test_scores_bad_inputs(pe, args, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.deberta_scores(*args, **{**SMALL, **kwargs})


def test_scores_mixed_dtypes() -> None:
    """(NumPy only: the JAX backend converts float64 inputs to float32 without x64.)"""
    import posenc

    with pytest.raises(ParameterError, match=r"q, k and the relative tables must share one "
                                             r"dtype, but q is float64, k is float64, rel_k is "
                                             r"float32"):
        posenc.deberta_scores(Q, K, T16.astype(np.float32), **SMALL)
    with pytest.raises(ParameterError, match=r"but q is float32, k is float64"):
        posenc.deberta_scores(Q.astype(np.float32), K)


def test_empty_shapes(pe) -> None:
    """Empty query or key lengths give empty [..., q_len, k_len] scores; empty distances give
    empty buckets."""
    table = np.zeros((16, 4), np.float32)
    for q_len, k_len in ((0, 5), (3, 0), (0, 0)):
        out = pe.deberta_scores(np.zeros((2, q_len, 4), np.float32),
                                np.zeros((2, k_len, 4), np.float32), table, table, **SMALL)
        assert tuple(out.shape) == (2, q_len, k_len)
    assert tuple(pe.deberta_bucket(np.zeros((0, 3), np.int64)).shape) == (0, 3)


# -- tables worked out by hand from the formula (not from the code) -----------------------------
def test_small_table_by_hand() -> None:
    """bucket_size 8, max_position 16: mid 4, ratio 15/4, x = 3·ln(a/4)/ln(3.75). Bucket 4 + n
    starts after a = 4·3.75^((n − 1)/3): 5 (> 4), 7 (> 6.21), 10 (> 9.66), 16 (> 15: the tie
    x = 3 at a = 15 stays in bucket 7), 24 (> 23.30)."""
    import posenc

    a = np.arange(0, 30)
    want = [0, 1, 2, 3, 4, 5, 5, 6, 6, 6, 7, 7, 7, 7, 7, 7, 8, 8, 8, 8, 8, 8, 8, 8,
            9, 9, 9, 9, 9, 9]
    got = posenc.deberta_bucket(a, bucket_size=8, max_position=16)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(posenc.deberta_bucket(-a, bucket_size=8, max_position=16),
                                  -np.array(want))
    clamped = posenc.deberta_bucket(a, bucket_size=8, max_position=16, clamp="original")
    np.testing.assert_array_equal(clamped, np.minimum(want, 7))


def test_v3_defaults_by_hand() -> None:
    """256 buckets, max 512: mid 128, x(a) = 127·ln(a/128)/ln(511/128); x(129) = 0.714,
    x(130) = 1.422, x(511) = 127 exactly, x(512) = 127.23."""
    import posenc

    rel = np.array([0, 128, -128, 129, 130, 511, -511, 512, -512])
    np.testing.assert_array_equal(posenc.deberta_bucket(rel),
                                  [0, 128, -128, 129, 130, 255, -255, 256, -256])
    np.testing.assert_array_equal(posenc.deberta_bucket(rel, clamp="original"),
                                  [0, 128, -128, 129, 130, 255, -255, 255, -255])


def test_integer_dtype_and_shape_are_kept() -> None:
    import posenc

    for dtype in (np.int8, np.int16, np.int32, np.int64):
        out = posenc.deberta_bucket(np.array([[-100, 0], [20, 100]], dtype), bucket_size=8,
                                    max_position=16)
        assert out.dtype == dtype and out.shape == (2, 2)
        # x(100) = 3·ln(25)/ln(3.75) = 7.31: bucket 4 + 8
        np.testing.assert_array_equal(out, [[-12, 0], [8, 12]])
    torch = pytest.importorskip("torch")
    out = posenc.deberta_bucket(torch.tensor([-512, 512], dtype=torch.int32))
    assert out.dtype == torch.int32 and out.tolist() == [-256, 256]


def test_scores_by_hand() -> None:
    """One query, three keys, d = 1, no buckets, span 1: rows c = clip(i − j + 1, 0, 1)."""
    import posenc

    q, k = np.array([[2.0]]), np.array([[1.0], [3.0], [5.0]])
    rel_k, rel_q = np.array([[10.0], [20.0]]), np.array([[100.0], [200.0]])
    # i − j = 0, −1, −2 -> rows 1, 0, 0
    got = posenc.deberta_scores(q, k, rel_k, rel_q, position_buckets=0,
                                max_relative_positions=1)
    want = np.array([[2 + 2 * 20 + 1 * 200, 6 + 2 * 10 + 3 * 100, 10 + 2 * 10 + 5 * 100]])
    np.testing.assert_allclose(got, want / math.sqrt(3), rtol=1e-15)


# -- oracles -------------------------------------------------------------------------------------
# transformers' float32 log minus the exact bucket, at the ties of the float32_tie cases only
HF_DIVERGENCE = {
    "float32_tie_ratio_16_9": {12: 1, -12: -1},
    "float32_tie_ratio_7_3": {49: 1, -49: -1},
}


@pytest.mark.oracle
@pytest.mark.parametrize("name", [c.name for c in specs()["deberta_bucket"].cases])
def test_bucket_golden_vs_transformers(name) -> None:
    torch = pytest.importorskip("torch")
    v2 = pytest.importorskip("transformers.models.deberta_v2.modeling_deberta_v2")
    spec = specs()["deberta_bucket"]
    case = golden.load(spec).cases[name]
    p = resolve_params(spec, case.params)
    rel = case.inputs["relative_position"]
    r = torch.from_numpy(rel)
    if p["clamp"] == "original":  # microsoft/DeBERTa's clamp, in front of the same formula
        r = torch.clamp(r, 1 - p["max_position"], p["max_position"] - 1)
    theirs = v2.make_log_bucket_position(r, p["bucket_size"], p["max_position"]).long().numpy()
    diff = theirs - case.output
    found = {int(a): int(b) for a, b in zip(rel[diff != 0], diff[diff != 0], strict=True)}
    expected = HF_DIVERGENCE.get(name, {})
    assert found == expected, f"transformers − golden at {found}, documented {expected}"


@pytest.mark.oracle
def test_relative_grid_vs_build_relative_position() -> None:
    torch = pytest.importorskip("torch")
    v2 = pytest.importorskip("transformers.models.deberta_v2.modeling_deberta_v2")
    spec = specs()["deberta_bucket"]
    case = golden.load(spec).cases["relative_grid"]
    p = resolve_params(spec, case.params)
    q_len, k_len = case.output.shape
    theirs = v2.build_relative_position(torch.zeros(q_len, 1), torch.zeros(k_len, 1),
                                        bucket_size=p["bucket_size"],
                                        max_position=p["max_position"])
    np.testing.assert_array_equal(theirs[0].numpy(), case.output)
    np.testing.assert_array_equal(case.inputs["relative_position"],
                                  np.arange(q_len)[:, None] - np.arange(k_len)[None, :])


@pytest.mark.oracle
def test_transformers_float32_far_beyond_max_position() -> None:
    """The spec's measured claim: with the v3 defaults transformers' float32 log equals the
    exact bucket for every |r| < 65317 and first differs there (one bucket low), far beyond
    max_position, where DisentangledSelfAttention clips every bucket to the last table row."""
    torch = pytest.importorskip("torch")
    v2 = pytest.importorskip("transformers.models.deberta_v2.modeling_deberta_v2")
    import posenc

    rel = np.arange(-70000, 70001)
    theirs = v2.make_log_bucket_position(torch.from_numpy(rel), 256, 512).long().numpy()
    ours = posenc.deberta_bucket(rel)
    wrong = np.abs(rel[theirs != ours])
    assert wrong.min() == 65317
    assert theirs[rel == 65317] == 700 and ours[rel == 65317] == 701


def _hf_scores(inputs: dict[str, np.ndarray | None], p: dict) -> np.ndarray:
    """The scores of transformers' DebertaV2 DisentangledSelfAttention.forward:
    q·kᵀ/scaled_size_sqrt + disentangled_attention_bias, in float64. The flattened leading
    dims are its heads. Its relative embeddings are [rel_k | rel_q] side by side (hidden size
    2·heads·d), and pos_key_proj / pos_query_proj select one half each with an identity block,
    so the projected tables are the given ones exactly."""
    import torch
    from transformers import DebertaV2Config
    from transformers.models.deberta_v2.modeling_deberta_v2 import (
        DisentangledSelfAttention,
        make_log_bucket_position,
        scaled_size_sqrt,
    )

    q, k = inputs["q"], inputs["k"]
    terms = {"c2p": inputs["rel_k"], "p2c": inputs["rel_q"]}
    terms = {t: a for t, a in terms.items() if a is not None}
    lead = np.broadcast_shapes(*(a.shape[:-2] for a in (q, k, *terms.values())))
    heads, (q_len, d), k_len = math.prod(lead), q.shape[-2:], k.shape[-2]
    span = p["position_buckets"] if p["position_buckets"] > 0 else p["max_relative_positions"]
    length = max(q_len, k_len)  # its p2c path fails for q_len != k_len: pad to a square

    def flat(a: np.ndarray, rows: int) -> np.ndarray:
        a = np.broadcast_to(a, (*lead, *a.shape[-2:])).reshape(heads, a.shape[-2], d)
        return np.concatenate([a, np.zeros((heads, rows - a.shape[1], d))], axis=1)

    ql, kl = (torch.from_numpy(flat(a, length)) for a in (q, k))
    factor = 1 + len(terms)
    scores = torch.bmm(ql, kl.transpose(-1, -2) / scaled_size_sqrt(ql, factor).double())
    if terms:
        width = heads * d
        config = DebertaV2Config(
            hidden_size=2 * width, num_attention_heads=heads, attention_head_size=d,
            relative_attention=True, position_buckets=p["position_buckets"],
            max_relative_positions=p["max_relative_positions"], pos_att_type=list(terms))
        module = DisentangledSelfAttention(config).double().eval()
        halves = {"c2p": 0, "p2c": 1}
        embeddings = np.zeros((2 * span, 2 * width))
        relative_pos = None
        if p["clamp"] == "original" and p["position_buckets"] > 0:
            ids = torch.arange(length)
            r = torch.clamp(ids[:, None] - ids[None, :], 1 - p["max_relative_positions"],
                            p["max_relative_positions"] - 1)
            relative_pos = make_log_bucket_position(r, p["position_buckets"],
                                                    p["max_relative_positions"]).long()
        with torch.no_grad():
            for term, table in terms.items():
                half = halves[term]
                # [heads, rows, d] -> [rows, heads·d], the layout transpose_for_scores undoes
                embeddings[:, half * width:(half + 1) * width] = (
                    flat(table, 2 * span).transpose(1, 0, 2).reshape(2 * span, width))
                proj = module.pos_key_proj if term == "c2p" else module.pos_query_proj
                weight = torch.zeros(width, 2 * width, dtype=torch.float64)
                weight[:, half * width:(half + 1) * width] = torch.eye(width)
                proj.weight.copy_(weight)
                proj.bias.zero_()
            scores = scores + module.disentangled_attention_bias(
                ql, kl, relative_pos, torch.from_numpy(embeddings), factor)
    out = scores[:, :q_len, :k_len].numpy().reshape(*lead, q_len, k_len)
    if p["scale"] is not None:  # transformers always scales by 1/sqrt(d·factor)
        out = out * math.sqrt(d * factor) * p["scale"]
    return out


@pytest.mark.oracle
@pytest.mark.parametrize("name", [c.name for c in specs()["deberta_scores"].cases])
def test_scores_golden_vs_transformers(name) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    spec = specs()["deberta_scores"]
    case = golden.load(spec).cases[name]
    theirs = _hf_scores(case.inputs, resolve_params(spec, case.params))
    assert theirs.shape == case.output.shape
    # scaled_size_sqrt is a float32 sqrt: relative error up to ~6e-8
    np.testing.assert_allclose(theirs, case.output, rtol=2e-7, atol=1e-12)


@pytest.mark.oracle
def test_transformers_p2c_fails_for_cross_lengths() -> None:
    """Why the oracle pads to a square: transformers' own q_len != k_len p2c path (build_rpos,
    with position_buckets and max_relative_positions passed swapped) builds a [k_len, k_len]
    term: alone it has the wrong shape, next to c2p's [q_len, k_len] term it raises."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.deberta_v2.modeling_deberta_v2 import DisentangledSelfAttention

    q, k = torch.zeros(1, 3, 4, dtype=torch.float64), torch.zeros(1, 5, 4, dtype=torch.float64)
    embeddings = torch.zeros(8, 4, dtype=torch.float64)
    for terms in (["p2c"], ["p2c", "c2p"]):
        config = transformers.DebertaV2Config(hidden_size=4, num_attention_heads=1,
                                              relative_attention=True, position_buckets=4,
                                              max_relative_positions=6, pos_att_type=terms)
        module = DisentangledSelfAttention(config).double().eval()
        if terms == ["p2c"]:
            bias = module.disentangled_attention_bias(q, k, None, embeddings, 2)
            assert tuple(bias.shape) == (1, 5, 5)  # not [1, q_len, k_len] = [1, 3, 5]
        else:
            with pytest.raises(RuntimeError, match="must match the size"):
                module.disentangled_attention_bias(q, k, None, embeddings, 3)


# -- torch.compile -------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_torch_compile_buckets_and_scores_with_changing_configs() -> None:
    """The host-side threshold tables are constants of the graph: compiling for several
    configurations and lengths (dynamo then makes lengths symbolic) stays exact."""
    torch = pytest.importorskip("torch")
    import posenc

    rel = torch.arange(-700, 700)
    for params in ({}, {"clamp": "original"}, {"bucket_size": 18, "max_position": 17},
                   {"bucket_size": 8, "max_position": 16, "clamp": "original"}):
        compiled = torch.compile(lambda r, params=params: posenc.deberta_bucket(r, **params),
                                 fullgraph=True)
        torch.testing.assert_close(compiled(rel), posenc.deberta_bucket(rel, **params),
                                   rtol=0, atol=0)

    def scores(q, k, rel_k, rel_q):
        return posenc.deberta_scores(q, k, rel_k, rel_q, position_buckets=8,
                                     max_relative_positions=10)

    compiled = torch.compile(scores, fullgraph=True)
    tables = torch.randn(2, 16, 4, dtype=torch.float64)
    for q_len, k_len in ((5, 5), (7, 9), (13, 4)):
        q = torch.randn(2, q_len, 4, dtype=torch.float64)
        k = torch.randn(2, k_len, 4, dtype=torch.float64)
        torch.testing.assert_close(compiled(q, k, tables[0], tables[1]),
                                   scores(q, k, tables[0], tables[1]), rtol=1e-13, atol=1e-13)


# -- broken implementations the harness must catch -----------------------------------------------
_IMPL = public_functions()


def _mutant(name: str, **overrides) -> object:
    return dataclasses.replace(get_backend("numpy"), name=name, overrides=overrides)


def _failing(backend, encodings=("deberta_bucket", "deberta_scores")) -> dict[str, set[str]]:
    options = Options(backends=[backend], encodings=list(encodings), dtypes=["float64"],
                      modes=["eager"], max_examples=6)
    out: dict[str, set[str]] = {}
    for result in run(options):
        if result.failed:
            out.setdefault(result.check.encoding, set()).add(
                f"{result.check.kind}:{result.check.name}")
    return out


def _hf_bucket(relative_position, *, bucket_size=256, max_position=512, clamp="transformers"):
    import torch
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    r = torch.from_numpy(np.asarray(relative_position))
    if clamp == "original":
        r = torch.clamp(r, 1 - max_position, max_position - 1)
    return make_log_bucket_position(r, bucket_size, max_position).long().numpy()


@pytest.mark.oracle
def test_transformers_float32_buckets_fail_exactly_the_tie_checks() -> None:
    """transformers' float32 log as a deberta_bucket backend: the harness flags the two tie
    cases and the exactness check of the configuration with a tie, and nothing else."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    found = _failing(_mutant("hf_float32_log", deberta_bucket=_hf_bucket), ["deberta_bucket"])
    assert found == {"deberta_bucket": {
        "case:float32_tie_ratio_16_9", "case:float32_tie_ratio_7_3",
        "property:deberta_bucket_exact[bucket_size=18,max_position=17]"}}


def _scores_paper_p2c(q, k, rel_k=None, rel_q=None, *, position_buckets=256,
                      max_relative_positions=512, clamp="transformers", scale=None):
    """The paper's eq.: the position-to-content term k_j·rel_q[c(j − i)], i.e. δ(j, i)."""
    kw = {"position_buckets": position_buckets, "max_relative_positions": max_relative_positions,
          "clamp": clamp}
    terms = 1 + (rel_k is not None) + (rel_q is not None)
    scale = scale or 1 / math.sqrt(q.shape[-1] * terms)
    out = _IMPL["deberta_scores"](q, k, rel_k, scale=scale, **kw)
    if rel_q is None:
        return out
    span = position_buckets if position_buckets > 0 else max_relative_positions
    key_minus_query = np.arange(k.shape[-2])[None, :] - np.arange(q.shape[-2])[:, None]
    delta = key_minus_query if position_buckets <= 0 else _IMPL["deberta_bucket"](
        key_minus_query, bucket_size=position_buckets, max_position=max_relative_positions,
        clamp=clamp)
    rows = np.clip(delta + span, 0, 2 * span - 1)  # [q_len, k_len]
    p2c = k @ np.swapaxes(rel_q, -1, -2)  # [..., k_len, 2·span]
    cols = np.arange(k.shape[-2])[None, :]
    return out + scale * p2c[..., cols, rows]


def _bucket_without_sign(relative_position, **kw):
    """|bucket|: the log bucket of the magnitude, the sign dropped."""
    return np.abs(_IMPL["deberta_bucket"](relative_position, **kw))


def test_paper_p2c_index_and_unsigned_buckets_are_caught() -> None:
    found = _failing(_mutant("paper_p2c", deberta_scores=_scores_paper_p2c), ["deberta_scores"])
    assert set(found) == {"deberta_scores"}
    assert {"case:v3_base_both", "case:p2c_only",
            "property:deberta_scores_p2c_same_index[max_relative_positions=10,"
            "position_buckets=8]"} <= found["deberta_scores"], found
    found = _failing(_mutant("unsigned", deberta_bucket=_bucket_without_sign), ["deberta_bucket"])
    names = found["deberta_bucket"]
    assert "case:v3_base_window" in names
    assert any(n.startswith("property:deberta_bucket_symmetric_monotone") for n in names)
