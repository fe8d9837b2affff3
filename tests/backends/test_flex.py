"""FlexAttention score_mods (posenc.backends.torch.flex): bad inputs, the bias a score_mod adds
against the materialised bias, flex_attention against posenc.attention (eager and compiled,
grouped-query heads), gradients of T5's table and KERPLE's parameters, the harness property
on torch and elsewhere, and broken score_mods that the property must catch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
flex_api = pytest.importorskip("torch.nn.attention.flex_attention")

from posenc.backends import torch as pe  # noqa: E402
from posenc.backends.torch import flex as torch_flex  # noqa: E402
from posenc.conformance import Options, plan, run  # noqa: E402
from posenc.errors import ParameterError  # noqa: E402

from ..mutants import flex as mutants  # noqa: E402

flex_attention, create_block_mask = flex_api.flex_attention, flex_api.create_block_mask
# eager flex_attention (its unfused reference path) warns once that it is not compiled
pytestmark = pytest.mark.filterwarnings("ignore:.*flex_attention called without torch.compile")
TABLE = torch.arange(64, dtype=torch.float32).reshape(32, 2) / 8
R = torch.tensor([0.5, 1.0, 1.5])


@pytest.mark.parametrize(
    ("factory", "args", "kwargs", "message"),
    [
        ("alibi_score_mod", (0, 2, 3), {}, r"num_heads=0 must be >= 1"),
        ("alibi_score_mod", (4, 5, 3), {}, r"q_len=5 must be <= k_len=3"),
        ("alibi_score_mod", (4, -1, 3), {}, r"q_len=-1 must be >= 0"),
        ("alibi_score_mod", (4, 2, 3.0), {}, r"k_len must be an int, got 3.0 \(float\)"),
        ("alibi_score_mod", (4, 2, 3), {"form": "both"},
         r"form='both' is not one of 'causal', 'key_only', 'symmetric'"),
        ("alibi_score_mod", (4, 2, 3), {"max_bias": -1.0}, r"max_bias=-1.0 must be a finite"),
        ("t5_score_mod", (2, 3, TABLE), {"num_buckets": 33},
         r"num_buckets=33 must be even when bidirectional=True"),
        ("t5_score_mod", (2, 3, TABLE), {"max_distance": 8}, r"max_distance=8 must be > "),
        ("t5_score_mod", (2, 3, TABLE), {"bidirectional": 1}, r"bidirectional must be a bool"),
        ("t5_score_mod", (2, 3, TABLE), {"query_offset": -1}, r"query_offset=-1 must be >= 0"),
        ("t5_score_mod", (-2, 3, TABLE), {}, r"q_len=-2 must be >= 0"),
        ("t5_score_mod", (2, 3, TABLE[:16]), {},
         r"table must have shape \[num_buckets, heads\] = \[32, heads\], got shape \(16, 2\)"),
        ("t5_score_mod", (2, 3, TABLE.numpy()), {}, r"table must be a torch.Tensor"),
        ("t5_score_mod", (2, 3, TABLE.to(torch.int64)), {}, r"table must have a real floating"),
        ("kerple_score_mod", (5, 4, R, R), {}, r"q_len=5 must be <= k_len=4"),
        ("kerple_score_mod", (2, 4, R, -R), {}, r"r2\[0\]=-0.5 must be finite and > 0"),
        ("kerple_score_mod", (2, 4, R, R + 1.0), {"form": "power"},
         r"r2\[1\]=2.0 must be > 0 and <= 2 for form='power'|r2\[2\]=2.5 must be > 0"),
        ("kerple_score_mod", (2, 4, R, R), {"form": "cubic"}, r"form='cubic' is not one of"),
        ("kerple_score_mod", (2, 4, [0.5, 1.0, 1.5], R), {}, r"r1 must be a torch.Tensor"),
        ("causal_mask_mod", (-3,), {}, r"query_offset=-3 must be >= 0"),
    ],
)
def test_bad_input_raises_a_parameter_error_naming_it(factory: str, args: tuple, kwargs: dict,
                                                      message: str) -> None:
    with pytest.raises(ParameterError, match=message):
        getattr(pe, factory)(*args, **kwargs)


def test_the_torch_backend_module_exposes_the_factories() -> None:
    for name in torch_flex.__all__:
        assert getattr(pe, name) is getattr(torch_flex, name)
        assert name in dir(pe)


def _added_bias(score_mod, heads: int, q_len: int, k_len: int, dtype) -> torch.Tensor:
    """What the score_mod adds to a zero score at every (h, q_idx, kv_idx), evaluated on
    broadcast index grids (as flex's reference path does, without flex_attention)."""
    zero = torch.zeros((), dtype=dtype)
    h = torch.arange(heads)[:, None, None]
    q_idx = torch.arange(q_len)[None, :, None]
    kv_idx = torch.arange(k_len)[None, None, :]
    return score_mod(zero, torch.tensor(0), h, q_idx, kv_idx).expand(heads, q_len, k_len)


SHAPES = [(1, 1), (1, 9), (4, 9), (9, 9)]  # (q_len, k_len): decode step, chunk, prefill


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("q_len", "k_len"), SHAPES)
@pytest.mark.parametrize("form", ["causal", "key_only", "symmetric"])
def test_alibi_adds_the_materialised_bias_bit_for_bit(form, q_len, k_len, dtype) -> None:
    heads = 5  # not a power of two
    got = _added_bias(pe.alibi_score_mod(heads, q_len, k_len, form=form, max_bias=6.0), heads,
                      q_len, k_len, dtype)
    want = pe.alibi_bias(heads, q_len, k_len, form=form, max_bias=6.0, dtype=dtype)
    assert got.dtype == dtype
    assert torch.equal(got, want.expand(heads, q_len, k_len))


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("q_len", "k_len", "query_offset"),
                         [(1, 1, 0), (1, 40, 39), (6, 40, 30), (9, 40, 0), (12, 5, 0), (3, 8, 20)])
def test_t5_adds_the_materialised_bias_bit_for_bit(q_len, k_len, query_offset,
                                                   bidirectional) -> None:
    """Exact copies of table entries, also for queries longer than the keys or past them."""
    table = torch.randn(16, 3, dtype=torch.float64)
    kw = {"bidirectional": bidirectional, "num_buckets": 16, "max_distance": 20,
          "query_offset": query_offset}
    for dtype in (torch.float32, torch.float64):
        got = _added_bias(pe.t5_score_mod(q_len, k_len, table, **kw), 3, q_len, k_len, dtype)
        # attention adds a float64 table's bias in float32 for float32 queries
        want = pe.t5_bias(q_len, k_len, table, **kw).to(dtype)
        assert torch.equal(got, want)


@pytest.mark.parametrize("form", ["log", "power"])
@pytest.mark.parametrize(("q_len", "k_len"), SHAPES)
def test_kerple_adds_the_materialised_bias(form, q_len, k_len) -> None:
    r1, r2 = torch.tensor([0.5, 2.0, 3.0]), torch.tensor([0.25, 1.0, 1.75])
    got = _added_bias(pe.kerple_score_mod(q_len, k_len, r1, r2, form=form), 3, q_len, k_len,
                      torch.float32)
    want = pe.kerple(q_len, k_len, r1, r2, form=form)
    torch.testing.assert_close(got, want, rtol=2e-7, atol=0.0)


def _qkv(heads: int, kv_heads: int, q_len: int, k_len: int, dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, heads, q_len, 16, generator=g, dtype=dtype)
    k = torch.randn(2, kv_heads, k_len, 16, generator=g, dtype=dtype)
    v = torch.randn(2, kv_heads, k_len, 16, generator=g, dtype=dtype)
    return q, k, v


def _causal(query_offset: int, q_len: int, k_len: int):
    mask = torch.arange(k_len)[None, :] <= query_offset + torch.arange(q_len)[:, None]
    block = create_block_mask(pe.causal_mask_mod(query_offset), None, None, q_len, k_len,
                              device="cpu")
    return mask, block


def _cases(q_len: int, k_len: int, heads: int):
    """(score_mod, materialised bias, query_offset of the causal mask or None, scale)."""
    table = torch.randn(16, heads, generator=torch.Generator().manual_seed(1))
    r1, r2 = torch.linspace(0.5, 2.0, heads), torch.linspace(0.25, 1.5, heads)
    t5 = {"num_buckets": 16, "max_distance": 20, "query_offset": 20, "bidirectional": False}
    end = k_len - q_len
    return {
        "alibi_causal": (pe.alibi_score_mod(heads, q_len, k_len),
                         pe.alibi_bias(heads, q_len, k_len), end, None),
        "alibi_symmetric": (pe.alibi_score_mod(heads, q_len, k_len, form="symmetric"),
                            pe.alibi_bias(heads, q_len, k_len, form="symmetric"), None, None),
        "t5_decoder": (pe.t5_score_mod(q_len, k_len, table, **t5),
                       pe.t5_bias(q_len, k_len, table, **t5), 20, 1.0),
        "kerple": (pe.kerple_score_mod(q_len, k_len, r1, r2),
                   pe.kerple(q_len, k_len, r1, r2), end, None),
    }


@pytest.mark.parametrize("case", ["alibi_causal", "alibi_symmetric", "t5_decoder", "kerple"])
def test_flex_attention_equals_attention_with_the_materialised_bias(case: str) -> None:
    """Eager flex_attention, 6 query heads sharing 2 KV heads (score_mod's h is the query
    head), against posenc.attention with the bias tensor and the KV heads repeated."""
    q_len, k_len = 7, 27
    score_mod, bias, offset, scale = _cases(q_len, k_len, 6)[case]
    q, k, v = _qkv(6, 2, q_len, k_len, torch.float64)
    mask, block = _causal(offset, q_len, k_len) if offset is not None else (None, None)
    got = flex_attention(q, k, v, score_mod=score_mod, block_mask=block, scale=scale,
                         enable_gqa=True)
    want = pe.attention(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), bias=bias,
                        mask=mask, scale=scale)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.slow
def test_compiled_flex_attention_equals_attention_with_the_materialised_bias() -> None:
    """torch.compile(flex_attention) on CPU in float32, T5's decoder bias (a captured
    [heads, q_len + k_len − 1] vector, a block mask, scale 1): one kernel, ~12 s to compile
    cold on 2 cores (each further score_mod ~3 s; the harness's compiled mode runs them all).
    Static shapes: see docs/usage.md on CPU and dynamic shapes."""
    compiled = torch.compile(flex_attention, dynamic=False)
    q_len, k_len = 7, 27
    q, k, v = _qkv(4, 4, q_len, k_len, torch.float32)
    score_mod, bias, offset, scale = _cases(q_len, k_len, 4)["t5_decoder"]
    mask, block = _causal(offset, q_len, k_len)
    got = compiled(q, k, v, score_mod=score_mod, block_mask=block, scale=scale)
    want = pe.attention(q, k, v, bias=bias, mask=mask, scale=scale)
    torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-5)


def test_gradients_reach_the_t5_table_and_kerple_parameters() -> None:
    """Float64, eager: d(loss)/d(weights) through flex_attention equals the gradient through
    posenc.attention with the materialised bias."""
    q_len, k_len = 5, 19
    q, k, v = _qkv(3, 3, q_len, k_len, torch.float64, seed=2)
    cotangent = torch.randn(2, 3, q_len, 16, dtype=torch.float64)
    mask, block = _causal(k_len - q_len, q_len, k_len)
    table = torch.randn(16, 3, dtype=torch.float64, requires_grad=True)
    r1 = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64, requires_grad=True)
    r2 = torch.tensor([0.25, 1.0, 1.5], dtype=torch.float64, requires_grad=True)
    t5 = {"num_buckets": 16, "max_distance": 20, "query_offset": 3}
    for weights, make_mod, make_bias in (
            ((table,), lambda: pe.t5_score_mod(q_len, k_len, table, **t5),
             lambda: pe.t5_bias(q_len, k_len, table, **t5)),
            ((r1, r2), lambda: pe.kerple_score_mod(q_len, k_len, r1, r2, form="power"),
             lambda: pe.kerple(q_len, k_len, r1, r2, form="power"))):
        out = flex_attention(q, k, v, score_mod=make_mod(), block_mask=block)
        got = torch.autograd.grad(out, weights, cotangent)
        want = torch.autograd.grad(pe.attention(q, k, v, bias=make_bias(), mask=mask),
                                   weights, cotangent)
        for g, w in zip(got, want, strict=True):
            assert g.abs().max() > 0
            torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.slow
def test_a_new_decode_offset_reuses_the_compiled_kernel() -> None:
    """The position offset is a captured tensor: decode steps (one query, one more key each)
    compile at most twice (static, then dynamic shapes) and then never again, where a captured
    int would recompile at every step."""
    from torch._dynamo.testing import CompileCounterWithBackend

    from posenc.conformance.properties.flex_score_mods import CONTROL_LIMIT, control_error

    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(flex_attention, backend=counter)
    control = torch.compile(flex_attention)  # its compiles must not reach the counter
    counts, torch_broken = [], []
    for k_len in range(20, 25):
        q, k, v = _qkv(4, 4, 1, k_len, torch.float32)
        got = compiled(q, k, v, score_mod=pe.alibi_score_mod(4, 1, k_len, form="symmetric"))
        want = pe.attention(q, k, v, bias=pe.alibi_bias(4, 1, k_len, form="symmetric"))
        counts.append(counter.frame_count)
        if not torch.allclose(got, want, rtol=2e-5, atol=2e-5):
            # blame torch only when its kernel is wrong with no score_mod at all
            error = control_error(torch, control, (q, k, v), None, None)
            assert error > CONTROL_LIMIT * float(v.abs().max()), (k_len, got, want)
            torch_broken.append((k_len, error))
    assert counts[1] <= 2 and counts[-1] == counts[1], counts
    if torch_broken:
        pytest.xfail(f"torch {torch.__version__}'s compiled CPU flex_attention is wrong without "
                     f"a score_mod at (k_len, error) {torch_broken}: docs/known-issues.md")


def _flex_results(backend, dtypes: list[str], encodings: list[str]) -> list:
    """The harness's results for the flex properties only (the other checks left out)."""
    options = Options(backends=[backend], dtypes=dtypes, modes=["eager"], max_examples=2,
                      encodings=encodings)
    return run(options, checks=[c for c in plan(options) if "flex_score_mod" in c.name])


def test_the_harness_property_passes_on_torch_and_is_unsupported_elsewhere() -> None:
    encodings = ["alibi_bias", "t5_bias", "kerple"]
    on_torch = _flex_results("torch", ["float64", "bfloat16"], encodings)
    assert len(on_torch) == 2 * 7  # 3 ALiBi forms, 2 T5 and 2 KERPLE configurations
    assert {r.status for r in on_torch} == {"pass"}, [(r.check.id, r.message) for r in on_torch]
    elsewhere = _flex_results("numpy", ["float64"], encodings)
    assert len(elsewhere) == 7 and {r.status for r in elsewhere} == {"unsupported"}


def _failing(backend, encoding: str, dtype: str = "float64") -> dict[str, str]:
    return {r.check.name: r.message for r in _flex_results(backend, [dtype], [encoding])
            if r.failed}


def test_t5_relative_position_as_query_minus_key_is_caught() -> None:
    assert set(_failing(mutants.T5_SIGN_FLIP, "t5_bias")) == {
        "t5_flex_score_mod[max_distance=24,num_buckets=16]",
        "t5_flex_score_mod[bidirectional=False,max_distance=24,num_buckets=16]"}


def test_start_aligned_alibi_queries_are_caught_where_softmax_can_see_them() -> None:
    """Start-aligned queries shift each row of the causal and key-only biases by a constant,
    which softmax ignores: only the symmetric form's attention changes."""
    assert set(_failing(mutants.ALIBI_START_ALIGNED, "alibi_bias")) == {
        "alibi_flex_score_mod[form=symmetric]"}


def test_a_score_mod_holding_the_materialised_bias_is_caught() -> None:
    failures = _failing(mutants.T5_MATERIALISED, "t5_bias", "float32")
    assert set(failures) == {
        "t5_flex_score_mod[max_distance=24,num_buckets=16]",
        "t5_flex_score_mod[bidirectional=False,max_distance=24,num_buckets=16]"}
    assert all("the score_mod holds 1200 elements" in m for m in failures.values()), failures


def test_captured_tensors_follow_closures_partials_and_views() -> None:
    from functools import partial

    from posenc.conformance.properties import flex_score_mods as flex

    big = torch.zeros(10, 10)
    view = big[0]
    ones = torch.ones(3)

    def inner(score):
        return score + view[0]

    def outer(score, b, h, q_idx, kv_idx, scale=ones):
        return inner(score) * scale[0]

    found = flex.captured_tensors(partial(outer, b=torch.zeros(2)), torch.Tensor)
    assert sorted(t.numel() for t in found) == [2, 3, 10]
    assert sorted(flex._held(t) for t in found) == [2, 3, 100]  # the view holds all of big



def test_a_failure_is_blamed_on_torch_only_when_its_own_kernel_fails_the_control() -> None:
    """The compiled-mode control: torch's flex_attention with no score_mod, compiled against
    eager. A sound kernel lets the score_mod's failure stand; a broken one turns it into an
    upstream failure naming the control's error."""
    from posenc.conformance.context import CheckFailure, UpstreamFailure
    from posenc.conformance.properties.flex_score_mods import blame_torch_if_control_fails

    q, k, v = _qkv(2, 2, 1, 8, torch.float32)
    failure = CheckFailure("the score_mod's own failure")
    sound = flex_attention  # eager stands in for a compiled kernel that is right
    assert blame_torch_if_control_fails(torch, sound, (q, k, v), None, None, 1.0, failure) is None

    def broken(*args, **kwargs):
        return flex_attention(*args, **kwargs) + 1.0

    with pytest.raises(UpstreamFailure, match=r"max abs error 1 > 0.1.*score_mod's own failure"):
        blame_torch_if_control_fails(torch, broken, (q, k, v), None, None, 1.0, failure)
