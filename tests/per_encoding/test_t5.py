"""t5_bucket / t5_bias: bad inputs on every backend, the goldens against transformers' T5
(including the float32 ties where transformers is one bucket low), the bucket table documented
in the seeds, and broken implementations that the harness must catch."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import posenc
from posenc import golden
from posenc.backends import get_backend
from posenc.catalog import specs
from posenc.encodings import public_functions
from posenc.errors import ParameterError
from posenc.specs import resolve_params

from ..failing import failing_by_encoding

REL = np.arange(-5, 6)
TABLE = np.zeros((32, 2))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_buckets": 31}, r"num_buckets=31 must be even when bidirectional=True"),
        ({"num_buckets": 2}, r"num_buckets=2 must be >= 4 when bidirectional=True"),
        ({"num_buckets": 1, "bidirectional": False},
         r"num_buckets=1 must be >= 2 when bidirectional=False"),
        ({"max_distance": 8}, r"max_distance=8 must be > max_exact=8 \(num_buckets=32, "
                              r"bidirectional=True\)"),
        ({"max_distance": 16, "bidirectional": False},
         r"max_distance=16 must be > max_exact=16 \(num_buckets=32, bidirectional=False\)"),
        ({"num_buckets": True}, r"num_buckets must be an int, got True \(bool\)"),
        ({"max_distance": 128.0}, r"max_distance must be an int, got 128.0 \(float\)"),
        ({"bidirectional": 1}, r"bidirectional must be a bool, got 1 \(int\)"),
    ],
)
def test_bucket_bad_parameters(pe, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.t5_bucket(REL, **kwargs)


@pytest.mark.parametrize(
    ("rel", "message"),
    [
        (np.array([1.0, -2.0]), r"relative_position must have a signed integer dtype \(key − "
                                r"query distances\), got float(64|32)"),
        (np.array([True, False]), r"relative_position must have a signed integer dtype .*, "
                                  r"got bool"),
    ],
)
def test_bucket_non_integer_positions(pe, rel, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.t5_bucket(rel)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((4, 4, np.zeros((31, 2))), {}, r"table must have shape \[num_buckets, heads\] = "
                                        r"\[32, heads\], got shape \(31, 2\)"),
        ((4, 4, np.zeros(32)), {}, r"table must have shape \[num_buckets, heads\] = "
                                   r"\[32, heads\], got shape \(32,\)"),
        ((4, 4, TABLE), {"num_buckets": 64}, r"= \[64, heads\], got shape \(32, 2\)"),
        ((-1, 4, TABLE), {}, r"q_len=-1 must be >= 0"),
        ((4, -2, TABLE), {}, r"k_len=-2 must be >= 0"),
        ((4, 4, TABLE), {"query_offset": -1}, r"query_offset=-1 must be >= 0"),
        ((True, 4, TABLE), {}, r"q_len must be an int, got True \(bool\)"),
        ((4, 4.0, TABLE), {}, r"k_len must be an int, got 4.0 \(float\)"),
        ((4, 4, TABLE), {"query_offset": False}, r"query_offset must be an int, got False"),
        ((4, 4, np.zeros((32, 2), np.int64)), {},
         r"table must have a real floating dtype, got int(64|32)"),
        ((4, 4, TABLE[:31]), {"num_buckets": 31}, r"num_buckets=31 must be even"),
        ((4, 4, TABLE), {"max_distance": 3}, r"max_distance=3 must be > max_exact=8"),
        ((4, 4, TABLE), {"bidirectional": None}, r"bidirectional must be a bool, got None"),
    ],
)
def test_bias_bad_inputs(pe, args, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.t5_bias(*args, **kwargs)


# -- narrow and extreme integers: |rel| and −rel overflow at a dtype's minimum, and a bucket
# beyond the dtype's range would wrap when cast back; expected buckets come from the NumPy
# reference (Python integers, exact) --------------------------------------------------------------
def _native(pe, values: np.ndarray, dtype: str):
    """``values`` as a ``dtype`` array of pe's framework (skipped where it has no such dtype,
    e.g. int64 in JAX without x64), passed to posenc's functions directly (pe's functions
    convert NumPy integers to the backend's index dtype)."""
    backend = get_backend(pe.__name__.rsplit(".", 1)[-1])
    out = backend.from_numpy(values, dtype, None)
    if not np.array_equal(backend.to_numpy(out), values) or dtype not in str(out.dtype):
        pytest.skip(f"{backend.name} holds no {dtype} array here")
    return backend, out


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_bucket_extreme_integers_of_every_width(pe, dtype, bidirectional) -> None:
    from posenc.reference import t5 as reference

    info = np.iinfo(dtype)
    values = np.array([v for v in (info.min, info.min + 1, -(2**31), -1000, -129, -128, -127,
                                   -91, -90, -1, 0, 1, 90, 91, 127, 128, 2**31 - 1, info.max - 1,
                                   info.max) if info.min <= v <= info.max], dtype=dtype)
    backend, rel = _native(pe, values, dtype)
    out = posenc.t5_bucket(rel, bidirectional=bidirectional)
    assert dtype in str(out.dtype)
    expected = reference.t5_bucket(values, bidirectional=bidirectional, num_buckets=32,
                                   max_distance=128)
    np.testing.assert_array_equal(backend.to_numpy(out), expected)


def test_bucket_as_many_buckets_as_int8_holds(pe) -> None:
    """128 buckets (up to 127) fit int8 exactly: every int8 distance against the reference."""
    from posenc.reference import t5 as reference

    values = np.arange(-128, 128, dtype=np.int8)
    backend, rel = _native(pe, values, "int8")
    for bidirectional in (True, False):
        out = posenc.t5_bucket(rel, bidirectional=bidirectional, num_buckets=128,
                               max_distance=1000)
        expected = reference.t5_bucket(values, bidirectional=bidirectional, num_buckets=128,
                                       max_distance=1000)
        np.testing.assert_array_equal(backend.to_numpy(out), expected)


def test_bucket_beyond_the_dtype_is_refused(pe) -> None:
    """Bucket 261 (of 512) does not fit int8: an error naming num_buckets and the dtype, not a
    wrapped bucket."""
    _, rel = _native(pe, np.array([5, -5], np.int8), "int8")
    with pytest.raises(ParameterError, match=r"num_buckets=512 gives buckets up to 511, beyond "
                                             r"the int8 range of the result"):
        posenc.t5_bucket(rel, num_buckets=512, max_distance=1000)
    backend, rel = _native(pe, np.array([5, -5], np.int16), "int16")
    out = posenc.t5_bucket(rel, num_buckets=512, max_distance=1000)
    # by hand: 5 < max_exact = 128 is its own bucket, in the upper half (256 + 5) after the query
    np.testing.assert_array_equal(backend.to_numpy(out), [261, 5])


@pytest.mark.parametrize("query_offset", [2**63, 2**31 - 4])
def test_bias_query_offset_beyond_int32_is_refused(pe, query_offset) -> None:
    with pytest.raises(ParameterError, match=rf"query_offset={query_offset}, q_len=1 and k_len=3: "
                                             r"query_offset \+ q_len \+ k_len = \d+ must be <= "
                                             r"2\*\*31 − 1 = 2147483647"):
        pe.t5_bias(1, 3, TABLE, query_offset=query_offset)


def test_bias_at_the_largest_query_offset(pe) -> None:
    from posenc.reference import t5 as reference

    table = np.arange(64, dtype=np.float64).reshape(32, 2)
    offset = 2**31 - 1 - 4
    backend = get_backend(pe.__name__.rsplit(".", 1)[-1])
    for bidirectional in (True, False):
        out = pe.t5_bias(1, 3, table, query_offset=offset, bidirectional=bidirectional)
        expected = reference.t5_bias(table, q_len=1, k_len=3, bidirectional=bidirectional,
                                     num_buckets=32, max_distance=128, query_offset=offset)
        np.testing.assert_array_equal(backend.to_numpy(out), expected)


def test_dtype_shape_and_empty_results(pe) -> None:
    """Buckets keep the shape of the input; empty q_len or k_len give an empty
    [heads, q_len, k_len] bias in the table's dtype."""
    rel = pe.t5_bucket(np.array([[-20, 0, 20]]))
    assert tuple(rel.shape) == (1, 3)
    np.testing.assert_array_equal(np.asarray(rel), [[10, 0, 26]])
    for q_len, k_len in ((0, 5), (3, 0)):
        out = pe.t5_bias(q_len, k_len, np.ones((32, 2), np.float32))
        assert tuple(out.shape) == (2, q_len, k_len)
        assert "float32" in str(out.dtype)


def test_bias_is_contiguous_heads_first() -> None:
    """The bias comes out contiguous: fused attention kernels (torch SDPA's memory-efficient
    path) copy a mask whose last axis is strided, once per call and per layer."""
    torch = pytest.importorskip("torch")
    from posenc.backends import numpy as pn
    from posenc.backends import torch as pt

    table = np.arange(32 * 3, dtype=np.float32).reshape(32, 3)
    for q_len, k_len, offset in ((5, 5, 0), (1, 7, 6), (4, 9, 2)):
        bias = pt.t5_bias(q_len, k_len, torch.asarray(table), query_offset=offset)
        assert bias.is_contiguous()
        assert np.asarray(pn.t5_bias(q_len, k_len, table, query_offset=offset)).flags.c_contiguous
        # each entry is the table's entry for its bucket (torch takes windows of the rows)
        rel = np.arange(k_len)[None, :] - (offset + np.arange(q_len))[:, None]
        buckets = np.asarray(pn.t5_bucket(rel))
        np.testing.assert_array_equal(bias.numpy(), np.moveaxis(table[buckets], -1, 0))


# -- the bucket table as documented, typed from the sources (not from the code) ---------------
# Seed 004 (bookstall's copy of kexue.fm/archives/8130), T5 defaults (32 buckets, max distance
# 128, bidirectional), f(i − j) for i − j = 0..30, i.e. keys at or before the query.
SEED_004 = [0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 8, 8, 9, 9, 9, 9,
            10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11]


def test_integer_dtype_is_kept() -> None:
    import posenc

    for dtype in (np.int8, np.int16, np.int32, np.int64):
        out = posenc.t5_bucket(np.array([-100, -20, 0, 20, 100], dtype))
        assert out.dtype == dtype
        np.testing.assert_array_equal(out, [15, 10, 0, 26, 31])  # 100 >= 91
    torch = pytest.importorskip("torch")
    out = posenc.t5_bucket(torch.tensor([-20, 20], dtype=torch.int32))
    assert out.dtype == torch.int32 and out.tolist() == [10, 26]


def test_default_table_from_seed_004() -> None:
    import posenc

    back = np.asarray(posenc.t5_bucket(-np.arange(31)))  # key − query = −(i − j)
    np.testing.assert_array_equal(back, SEED_004)
    # seed 000 has a typo (i − j = 23 -> 10): 23 >= 8·2^(3/2) = 22.6 starts bucket 11
    assert back[23] == 11
    # keys after the query: the same table in the upper half (Mesh TF / transformers: + 16)
    ahead = np.asarray(posenc.t5_bucket(np.arange(1, 31)))
    np.testing.assert_array_equal(ahead, 16 + np.array(SEED_004[1:]))


def test_default_bucket_starts_by_hand() -> None:
    """Bidirectional defaults: 16 buckets a side, max_exact 8; bucket 8 + k starts at the
    smallest n >= 8·16^(k/8) = 8·2^(k/2): 12 (11.3), 16, 23 (22.6), 32, 46 (45.3), 64,
    91 (90.5); 16, 32 and 64 are exact ties, where a float32 log one ulp low drops a bucket."""
    import posenc

    starts = [8, 12, 16, 23, 32, 46, 64, 91]
    for k, n in enumerate(starts):
        got = np.asarray(posenc.t5_bucket(np.array([-(n - 1), -n, n - 1, n])))
        assert list(got) == [7 + k, 8 + k, 23 + k, 24 + k], (n, got)
    far = np.asarray(posenc.t5_bucket(np.array([-127, -128, -10**9, 127, 128, 10**9])))
    assert list(far) == [15, 15, 15, 31, 31, 31]


def test_decoder_bucket_starts_from_the_formula() -> None:
    """Unidirectional defaults: 32 buckets, max_exact 16; bucket 16 + k starts at
    ceil(16·8^(k/16)) = ceil(16·2^(3k/16)), never an exact tie for 0 < k < 16."""
    import posenc

    n = np.arange(0, 300)
    want = [m if m < 16 else 16 + min(15, sum(1 for k in range(1, 16)
                                              if m >= math.ceil(16 * 2 ** (3 * k / 16))))
            for m in n]
    np.testing.assert_array_equal(np.asarray(posenc.t5_bucket(-n, bidirectional=False)), want)
    np.testing.assert_array_equal(np.asarray(posenc.t5_bucket(n, bidirectional=False)), 0)


# -- transformers as the oracle ----------------------------------------------------------------
# Where transformers' float32 log lands exactly on an integer and comes out one ulp low:
# {case: {relative position: transformers' bucket − exact bucket}} (measured, see the spec).
HF_DIVERGENCE = {
    "float32_tie_long_range": {-131072: -1, -524288: -1},
    "bidirectional_tie_long_range": {-131072: -1, 131072: -1, -524288: -1, 524288: -1},
}


@pytest.mark.oracle
@pytest.mark.parametrize("name", [c.name for c in specs()["t5_bucket"].cases])
def test_bucket_golden_vs_transformers(name) -> None:
    torch = pytest.importorskip("torch")
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    spec = specs()["t5_bucket"]
    case = golden.load(spec).cases[name]
    params = resolve_params(spec, case.params)
    rel = case.inputs["relative_position"]
    theirs = t5.T5Attention._relative_position_bucket(torch.from_numpy(rel), **params).numpy()
    expected = HF_DIVERGENCE.get(name, {})
    diff = theirs - case.output
    found = {int(r): int(d) for r, d in zip(rel[diff != 0], diff[diff != 0], strict=True)}
    assert found == expected, f"transformers − golden at {found}, documented {expected}"


@pytest.mark.oracle
@pytest.mark.parametrize("name", [c.name for c in specs()["t5_bias"].cases])
def test_bias_golden_vs_transformers_compute_bias(name) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.t5.modeling_t5 import T5Attention

    spec = specs()["t5_bias"]
    case = golden.load(spec).cases[name]
    p = resolve_params(spec, case.params)
    table = case.inputs["table"]
    config = transformers.T5Config(
        d_model=8, d_kv=4, num_heads=table.shape[1], is_decoder=not p["bidirectional"],
        relative_attention_num_buckets=p["num_buckets"],
        relative_attention_max_distance=p["max_distance"])
    attention = T5Attention(config, has_relative_attention_bias=True, layer_idx=0).double()
    with torch.no_grad():
        attention.relative_attention_bias.weight.copy_(torch.from_numpy(table))
        theirs = attention.compute_bias(p["q_len"], p["k_len"], device="cpu",
                                        past_seen_tokens=p["query_offset"])
    assert theirs.shape == (1, *case.output.shape)
    np.testing.assert_array_equal(theirs[0].numpy(), case.output)


# -- torch.compile -----------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_torch_compile_after_recompiles_with_other_bucket_counts() -> None:
    """Regression: once dynamo had recompiled the same code for other parameter values it made
    num_buckets / max_distance symbolic, and the exact host-side thresholds became sympy
    expressions with huge powers (RecursionError)."""
    torch = pytest.importorskip("torch")
    import posenc

    def compiled(params):
        def call(rel):
            return posenc.t5_bucket(rel, **params)

        return torch.compile(call, fullgraph=True)

    rel = torch.arange(-700, 700)
    for params in ({}, {"bidirectional": False}, {"num_buckets": 64, "max_distance": 256},
                   {"bidirectional": False, "num_buckets": 33, "max_distance": 100}):
        torch.testing.assert_close(compiled(params)(rel), posenc.t5_bucket(rel, **params),
                                   rtol=0, atol=0)


# -- broken implementations the harness must catch ----------------------------------------------
_IMPL = public_functions()


def _mutant(name: str, **overrides) -> object:
    return dataclasses.replace(get_backend("numpy"), name=name, overrides=overrides)


def _failing(backend) -> dict[str, set[str]]:
    return failing_by_encoding(backend, encodings=["t5_bucket", "t5_bias"])


def _hf_bucket(relative_position, *, bidirectional=True, num_buckets=32, max_distance=128):
    import torch
    from transformers.models.t5.modeling_t5 import T5Attention

    out = T5Attention._relative_position_bucket(
        torch.from_numpy(np.asarray(relative_position)), bidirectional=bidirectional,
        num_buckets=num_buckets, max_distance=max_distance)
    return out.numpy()


@pytest.mark.oracle
def test_transformers_float32_buckets_fail_exactly_the_tie_checks() -> None:
    """transformers' float32 log as a t5_bucket backend: the harness flags the two tie cases
    and the drawn-distance check of the configuration with ties, and nothing else."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    found = _failing(_mutant("hf_float32_log", t5_bucket=_hf_bucket))
    assert found == {"t5_bucket": {
        "case:float32_tie_long_range", "case:bidirectional_tie_long_range",
        "property:t5_bucket_exact[max_distance=1048576,num_buckets=64]"}}


def _bias_ignoring_offset(q_len, k_len, table, *, query_offset=0, **kw):
    """The classic cache bug: queries at arange(q_len) whatever the cache holds."""
    return _IMPL["t5_bias"](q_len, k_len, table, **kw)


def _bucket_query_minus_key(relative_position, **kw):
    """DeBERTa's sign convention fed to T5's buckets."""
    return _IMPL["t5_bucket"](-np.asarray(relative_position), **kw)


def test_ignored_query_offset_and_flipped_sign_are_caught() -> None:
    found = _failing(_mutant("no_offset", t5_bias=_bias_ignoring_offset))
    assert set(found) == {"t5_bias"}
    assert {"case:encoder_chunk_at_offset", "case:decoder_cache_step",
            "property:t5_bias_cache_decoding", "property:t5_bias_translation"} <= found["t5_bias"]
    found = _failing(_mutant("query_minus_key", t5_bucket=_bucket_query_minus_key))
    assert set(found) == {"t5_bucket"}
    assert {"case:default_edges", "property:t5_bucket_range_and_sides"} <= found["t5_bucket"]
