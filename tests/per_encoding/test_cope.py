"""CoPE: bad inputs on every backend, the goldens against the paper's appendix code and
facebookresearch/RAM's ContextPosSelfAttn (both transcribed below), and broken
implementations that the properties catch."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import posenc
from posenc import golden
from posenc.catalog import specs
from posenc.errors import ParameterError
from posenc.reference.cope import cope_variant
from posenc.specs import resolve_params

from ..failing import failing_properties
from ..host_reads import spy_host_reads

RNG = np.random.default_rng(0)
Q = RNG.standard_normal((2, 5, 4))
K = RNG.standard_normal((2, 5, 4))
E = RNG.standard_normal((6, 4))


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((Q, K, E[:0]), {"npos_max": 0}, r"npos_max=0 must be >= 1"),
        ((Q, K, E), {"npos_max": -3}, r"npos_max=-3 must be >= 1"),
        ((Q, K, E), {"npos_max": 6.0}, r"npos_max must be an int, got 6.0 \(float\)"),
        ((Q, K, E), {"npos_max": 8},
         r"pos_emb has shape \(6, 4\): 6 rows, expected npos_max=8"),
        ((Q, K, E[:, :3]), {"npos_max": 6},
         r"pos_emb has shape \(6, 3\): width 3, expected d=4"),
        ((Q, K[..., :3], E), {"npos_max": 6},
         r"q and k must have the same last dim d, got shapes \(2, 5, 4\) and \(2, 5, 3\)"),
        ((Q, K[:, :3], E), {"npos_max": 6}, r"q_len=5 > k_len=3"),
        ((Q, K, E[None]), {"npos_max": 6},
         r"pos_emb must have shape \[npos_max, d\], got shape \(1, 6, 4\)"),
        ((Q[0, 0], K, E), {"npos_max": 6}, r"q must have at least 2 dims"),
        ((Q, K, E), {"npos_max": 6, "scale": -1.0}, r"scale=-1.0 must be a finite number > 0"),
        ((Q, K, E), {"npos_max": 6, "causal": "yes"}, r"causal must be a bool, got 'yes'"),
        ((Q, K[:1].repeat(3, 0), E), {"npos_max": 6}, r"batch dims do not broadcast"),
        ((Q, K, E, np.ones((2, 4), bool)), {"npos_max": 6},
         r"key_mask has shape \(2, 4\) but q and k have leading dims \(2,\) and k_len=5: "
         r"key_mask must be \[batch, k_len\] = \[2, 5\]"),
        ((Q, K, E, np.ones((3, 5), bool)), {"npos_max": 6},
         r"key_mask has shape \(3, 5\) but .* = \[2, 5\]"),
        ((Q, K, E, np.ones(5, bool)), {"npos_max": 6}, r"key_mask has shape \(5,\) but"),
        ((Q[0], K[0], E, np.ones((2, 5), bool)), {"npos_max": 6},
         r"key_mask has shape \(2, 5\) but q and k have leading dims \(\) and k_len=5: "
         r"key_mask must be \[batch, k_len\] = \[1, 5\]"),
        ((Q, K, E, np.ones((2, 5))), {"npos_max": 6},
         r"key_mask must be boolean \(True = a real key, False = padding\), got dtype float"),
    ],
)
def test_bad_input_raises_a_parameter_error_naming_it(pe, args, kwargs, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.cope(*args, **kwargs)


def test_mixed_dtypes_are_refused_naming_them() -> None:
    with pytest.raises(ParameterError, match="q, k and pos_emb must share one dtype, got q "
                                             "float32, k float32, pos_emb float64"):
        posenc.cope(Q.astype(np.float32), K.astype(np.float32), E, npos_max=6)


def test_integer_inputs() -> None:
    with pytest.raises(ParameterError, match="k must have a real floating dtype, got int64"):
        posenc.cope(Q, np.ones((2, 5, 4), np.int64), E, npos_max=6)


def test_the_result_has_the_dtype_and_shape_of_the_scores(pe) -> None:
    out = pe.cope(Q.astype(np.float32), K.astype(np.float32), E.astype(np.float32), npos_max=6)
    assert "float32" in str(out.dtype) and tuple(out.shape) == (2, 5, 5)


# --------------------------------------------------------------------------------------------
# the reference code, transcribed
# --------------------------------------------------------------------------------------------


def paper_cope(q: np.ndarray, k: np.ndarray, pos_emb: np.ndarray, npos_max: int,
               scale: float, mask: np.ndarray) -> np.ndarray:
    """The appendix code of Golovneva et al. 2024 (arXiv:2405.18719), classes CoPE and SelfAttn,
    in float64: ``attn_logits = bmm(query, key.T) / sqrt(head_dim); attn_logits += mask.log();``
    then ``CoPE.forward(query, attn_logits)``, returned before it is added to the logits.
    ``pos_emb`` is the paper's parameter ``[1, head_dim, npos_max]``. The only change: the
    division by sqrt(head_dim) is a product with ``scale`` (1/sqrt(head_dim) by default)."""
    torch = pytest.importorskip("torch")
    query, key = torch.tensor(q), torch.tensor(k)
    attn_logits = torch.bmm(query, key.transpose(-1, -2))
    attn_logits = attn_logits * scale
    attn_logits += torch.from_numpy(mask).log()
    # CoPE.forward
    gates = torch.sigmoid(attn_logits)
    pos = gates.flip(-1).cumsum(dim=-1).flip(-1)
    pos = pos.clamp(max=npos_max - 1)
    pos_ceil = pos.ceil().long()
    pos_floor = pos.floor().long()
    logits_int = torch.matmul(query, torch.from_numpy(pos_emb))
    logits_ceil = logits_int.gather(-1, pos_ceil)
    logits_floor = logits_int.gather(-1, pos_floor)
    w = pos - pos_floor
    return (logits_ceil * w + logits_floor * (1 - w)).numpy()


def ram_cope(q: np.ndarray, k: np.ndarray, pos_emb: np.ndarray, npos: int, scale: float,
             attn_mask: np.ndarray) -> np.ndarray:
    """facebookresearch/RAM projects/cope/src/cope/context_position.py, ContextPosSelfAttn
    .forward up to ``pos_logits`` (key_cope = key, no value gates), in float64, with
    ``1 / math.sqrt(self.cfg.head_dim)`` as ``scale``: the gates are multiplied by the 0/1
    mask rather than sent through log(0)."""
    torch = pytest.importorskip("torch")
    query, key_cope = torch.tensor(q), torch.tensor(k)
    gate_logits = torch.bmm(query, key_cope.transpose(-1, -2))
    gates = torch.sigmoid(gate_logits * scale)
    gates = gates * torch.from_numpy(attn_mask)
    positions = gates.flip(-1).cumsum(dim=-1).flip(-1)
    positions = positions.clamp(max=npos - 1)
    pos_logits_fixed = torch.matmul(query, torch.from_numpy(pos_emb))
    positions_ceil = positions.ceil().long()
    positions_floor = positions.floor().long()
    pos_logits_ceil = pos_logits_fixed.gather(-1, positions_ceil)
    pos_logits_floor = pos_logits_fixed.gather(-1, positions_floor)
    pos_ceil_weight = positions - positions_floor
    return (pos_logits_ceil * pos_ceil_weight
            + pos_logits_floor * (1 - pos_ceil_weight)).numpy()


def _cases() -> list[str]:
    return [c.name for c in specs()["cope"].cases]


@pytest.mark.parametrize("oracle", [paper_cope, ram_cope])
@pytest.mark.parametrize("name", _cases())
def test_golden_vs_reference_code(name: str, oracle: Any) -> None:
    """Equal wherever the query sees the key; above the diagonal (causal) the reference code
    leaves q_i·E_0 (its gates there are 0, so p = 0) where the spec has 0."""
    spec = specs()["cope"]
    case = golden.load(spec).cases[name]
    p = resolve_params(spec, case.params)
    q, k, table = (case.inputs[n] for n in ("q", "k", "pos_emb"))
    d = q.shape[-1]
    scale = 1 / math.sqrt(d) if p["scale"] is None else p["scale"]
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    q_len, k_len = q.shape[-2], k.shape[-2]
    rows = math.prod(batch)
    q3 = np.broadcast_to(q, (*batch, q_len, d)).reshape(rows, q_len, d)
    k3 = np.broadcast_to(k, (*batch, k_len, d)).reshape(rows, k_len, d)
    seen = np.arange(k_len)[None, :] <= (np.arange(q_len) + k_len - q_len)[:, None]
    if not p["causal"]:
        seen = np.ones_like(seen)
    real = np.ones((1, k_len), bool) if case.inputs.get("key_mask") is None else \
        case.inputs["key_mask"]  # [batch, k_len] over the first leading dim
    real = (real.reshape(real.shape[0], *([1] * (len(batch) - 1)), 1, k_len) if batch
            else real.reshape(1, k_len))
    kept = np.broadcast_to(seen & real, case.output.shape)
    mask = kept.reshape(rows, q_len, k_len).astype(np.float64)
    expected = oracle(q3, k3, table.T[None], p["npos_max"], scale, mask)
    expected = expected.reshape(case.output.shape)
    np.testing.assert_allclose(case.output[kept], expected[kept], rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(case.output[~kept], 0.0)
    # after the query every gate is 0 (p = 0): the reference code leaves q_i·E_0 there
    above = ~np.broadcast_to(seen, case.output.shape)
    first_row = np.broadcast_to((q @ table.T)[..., :, :1], case.output.shape)
    np.testing.assert_allclose(expected[above], first_row[above], rtol=1e-13, atol=1e-13)


def test_all_gates_one_is_relative_position() -> None:
    """The paper, section 3: gates always 1 give p_ij = i − j + 1, token-based relative
    positions; the term is then q_i·E[i − j + 1] read straight from the table."""
    q = np.full((1, 6, 2), 8.0)
    k = np.full((1, 6, 2), 8.0)  # q·k / sqrt(2) ≈ 90.5: sigmoid = 1 in float64
    table = RNG.standard_normal((8, 2))
    out = posenc.cope(q, k, table, npos_max=8)
    i, j = np.meshgrid(np.arange(6), np.arange(6), indexing="ij")
    expected = np.where(j <= i, (q[0] @ table.T)[i, np.minimum(i - j + 1, 7)], 0.0)
    np.testing.assert_allclose(out[0], expected, rtol=1e-14)


def test_long_rows_keep_float32_positions_accurate() -> None:
    """2048 keys with gates near 1/2: the float32 flipped cumulative sum stays within 1e-3 of
    the float64 positions (read off a linear table), as a total minus a prefix would not
    guarantee."""
    n = 2048
    q = np.zeros((1, 4), np.float32)
    q[0, 0] = 1.0
    k = (RNG.standard_normal((n, 4)) * 0.01).astype(np.float32)
    table = np.zeros((n + 1, 4), np.float32)
    table[:, 0] = np.arange(n + 1)
    got = posenc.cope(q, k, table, npos_max=n + 1).astype(np.float64)
    expected = posenc.cope(q.astype(np.float64), k.astype(np.float64), table.astype(np.float64),
                           npos_max=n + 1)
    np.testing.assert_allclose(got, expected, atol=1e-3)


# --------------------------------------------------------------------------------------------
# broken implementations fail the properties (no goldens involved)
# --------------------------------------------------------------------------------------------


def _broken(**bug: Any) -> Any:
    def cope(q: Any, k: Any, pos_emb: Any, key_mask: Any = None, *, npos_max: int,
             scale: float | None = None, causal: bool = True) -> Any:
        if "causal" in bug:
            causal = bug["causal"]
        knobs = {key: value for key, value in bug.items() if key not in ("causal", "gates")}
        gate_mask = None if bug.get("gates") == "unmasked" else key_mask
        out = cope_variant(q, k, pos_emb, npos_max=npos_max, scale=scale, causal=causal,
                           key_mask=gate_mask, **knobs)
        if key_mask is not None:  # the term still 0 on padding: only the gates are wrong
            real = np.asarray(key_mask)
            out = out * real.reshape(real.shape[0], *([1] * (out.ndim - 2)), real.shape[1])
        return out.astype(np.asarray(q).dtype)
    return cope


def _failing_properties(**bug: Any) -> set[str]:
    overrides = {"cope": _broken(**bug)} if bug else {}
    return failing_properties(["cope"], name="broken_cope", **overrides)


def test_unbroken_backend_passes_the_properties() -> None:
    assert _failing_properties() == set()


def test_reference_as_backend_passes_the_properties() -> None:
    assert _failing_properties(swap_weights=False) == set()


def test_forward_cumulative_sum_fails_the_counting_and_monotone_properties() -> None:
    assert {"cope_counts_gated_keys", "cope_positions_from_linear_table"} <= \
        _failing_properties(count="from_start")


def test_missing_clamp_fails_the_counting_property() -> None:
    assert {"cope_counts_gated_keys", "cope_positions_from_linear_table"} <= \
        _failing_properties(clamp=False)


def test_swapped_weights_fail_the_interpolation_property() -> None:
    assert "cope_interpolation_between_rows" in _failing_properties(swap_weights=True)


def test_padded_keys_counted_fail_the_padding_property() -> None:
    assert {"cope_padded_keys_ignored", "cope_padded_keys_ignored[causal=False]"} <= \
        _failing_properties(gates="unmasked")


def test_gates_without_the_causal_mask_fail_the_causal_properties() -> None:
    assert {"cope_counts_gated_keys", "cope_positions_from_linear_table",
            "cope_causal"} <= _failing_properties(causal=False)


# --------------------------------------------------------------------------------------------
# cost in PyTorch eager mode: no host reads, nothing larger than the scores
# --------------------------------------------------------------------------------------------


def test_torch_eager_reads_nothing_back_and_builds_nothing_larger_than_the_scores(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ATen op's result holds at most batch · heads · q_len · max(k_len, npos_max)
    elements (no [q, k, npos_max] or [q, k, d] tensor), and no tensor value reaches the host
    (on a GPU that would wait for the device)."""
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode

    batch, heads, q_len, k_len, d, npos_max = 2, 3, 16, 24, 8, 20
    largest: list[int] = []

    class Sizes(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, tuple | list) else (out,):
                if isinstance(t, torch.Tensor):
                    largest.append(t.numel())
            return out

    reads = spy_host_reads(torch, monkeypatch)
    q = torch.randn(batch, heads, q_len, d)
    k = torch.randn(batch, heads, k_len, d)
    table = torch.randn(npos_max, d)
    with Sizes():
        out = posenc.cope(q, k, table, npos_max=npos_max)
    monkeypatch.undo()
    assert reads == []
    assert tuple(out.shape) == (batch, heads, q_len, k_len)
    assert max(largest) <= batch * heads * q_len * max(k_len, npos_max)
