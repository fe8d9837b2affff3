"""Cross-checks of the stored goldens against independent peer implementations.

The goldens are what is under test here: every expected value below comes from a peer
(transformers, the ONNX reference evaluator, keras-hub, torch), never from posenc's own
reference or encodings; posenc is only used to load the specs and the stored goldens.
Each test skips when its peer is not installed.
"""

from __future__ import annotations

import contextlib
import inspect

import numpy as np
import pytest

# keras-hub pulls in TensorFlow; importing TensorFlow before torch has crashed the process,
# so torch (when present) is imported first, before any peer.
with contextlib.suppress(ImportError):
    import torch  # noqa: F401

from posenc import golden
from posenc.catalog import specs
from posenc.specs import resolve_params

pytestmark = pytest.mark.oracle

F32_EPS = 1.2e-7  # float32 machine epsilon (2**-23 = 1.19e-7), rounded up
F64_EPS = 2.3e-16  # float64 machine epsilon (2**-52 = 2.22e-16), rounded up


def _cases(spec_id: str, keep) -> list[str]:
    """Names of the cases of ``spec_id`` whose resolved params satisfy ``keep``."""
    spec = specs()[spec_id]
    return [c.name for c in spec.cases if keep(resolve_params(spec, c.params))]


def _load(spec_id: str, name: str) -> tuple[golden.GoldenCase, dict]:
    spec = specs()[spec_id]
    case = _goldens(spec_id).cases[name]
    return case, resolve_params(spec, case.params)


_GOLDEN_CACHE: dict[str, golden.Golden] = {}


def _goldens(spec_id: str) -> golden.Golden:
    if spec_id not in _GOLDEN_CACHE:
        _GOLDEN_CACHE[spec_id] = golden.load(specs()[spec_id])
    return _GOLDEN_CACHE[spec_id]


# --------------------------------------------------------------------------------------------
# RoPE: shape plumbing shared by the transformers and ONNX oracles
# --------------------------------------------------------------------------------------------


def _as_bhsd(x: np.ndarray, positions: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """x [..., seq, dim] as [batch, heads, seq, dim] and positions as [batch, seq] int64.

    posenc's convention: positions [batch, seq] apply to x[b, ..., s, :], so the first axis of
    x (when x has more than two) is the batch and everything between it and seq are heads.
    """
    seq, dim = x.shape[-2:]
    if x.ndim == 2:
        batch, heads = 1, 1
    else:
        batch, heads = x.shape[0], int(np.prod(x.shape[1:-2], dtype=np.int64))
    x4 = x.reshape(batch, heads, seq, dim)
    if positions is None:
        pos = np.broadcast_to(np.arange(seq, dtype=np.int64), (batch, seq))
    elif positions.ndim == 1:
        pos = np.broadcast_to(positions.astype(np.int64), (batch, seq))
    else:
        assert positions.shape == (batch, seq), (positions.shape, x.shape)
        pos = positions.astype(np.int64)
    return x4, np.array(pos, dtype=np.int64, order="C")  # a writable copy


def _f32_rope_atol(pos: np.ndarray, x: np.ndarray) -> float:
    # The peer computes angles and cos/sin in float32: the angle m * theta_i carries a relative
    # error of a few eps32, i.e. an absolute error of a few eps32 * max|m| (theta_0 = 1), and the
    # rotation turns that into an output error of at most ~sqrt(2) * max|x| times it.
    max_angle = float(np.max(np.abs(pos), initial=0))
    return 1e-5 + 4 * F32_EPS * max_angle * float(np.max(np.abs(x), initial=0))


# --------------------------------------------------------------------------------------------
# 1. transformers: Llama (full rotary) and GPT-NeoX (partial rotary), half layout
# --------------------------------------------------------------------------------------------

# default frequencies here; the scaling schedules are checked in tests/per_encoding/test_rope_scaling.py
HF_FULL = _cases("rope", lambda p: p["layout"] == "half" and p["rotary_dim"] is None
                 and p["scaling"] is None)
HF_PARTIAL = _cases("rope", lambda p: p["layout"] == "half" and p["rotary_dim"] is not None
                    and p["scaling"] is None)


def _check_hf(name, rotary_cls, apply_fn, config, rotary_dim):
    torch = pytest.importorskip("torch")
    case, _ = _load("rope", name)
    x, positions = case.inputs["x"], case.inputs["positions"]
    x4, pos = _as_bhsd(x, positions)
    rotary = rotary_cls(config)
    if rotary.inv_freq.shape[-1] != rotary_dim // 2:
        pytest.skip(f"transformers built {rotary.inv_freq.shape[-1]} frequencies, "
                    f"not rotary_dim/2 = {rotary_dim // 2}")
    xt = torch.from_numpy(np.ascontiguousarray(x4))  # float64: only cos/sin are float32
    cos, sin = rotary(xt, torch.from_numpy(pos))
    assert cos.shape == (*pos.shape, rotary_dim)
    q, k = apply_fn(xt, xt.clone(), cos, sin, unsqueeze_dim=1)
    atol = _f32_rope_atol(pos, x)
    for label, out in (("q", q), ("k", k)):
        got = out.numpy().reshape(x.shape)
        np.testing.assert_allclose(got, case.output, rtol=0, atol=atol,
                                   err_msg=f"rope/{name} as {label} vs transformers")


@pytest.mark.parametrize("name", HF_FULL)
def test_rope_half_vs_transformers_llama(name):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import (
        LlamaRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    case, params = _load("rope", name)
    dim = case.inputs["x"].shape[-1]
    config = LlamaConfig(
        hidden_size=dim, num_attention_heads=1, num_key_value_heads=1, head_dim=dim,
        rope_parameters={"rope_type": "default", "rope_theta": float(params["base"])},
    )
    _check_hf(name, LlamaRotaryEmbedding, apply_rotary_pos_emb, config, dim)


@pytest.mark.parametrize("name", HF_PARTIAL)
def test_rope_half_partial_vs_transformers_gpt_neox(name):
    # GPT-NeoX (and Phi) rotate the first head_dim * partial_rotary_factor features, with
    # theta's exponent over that rotary dim, and pass the rest through (inside
    # gpt_neox's apply_rotary_pos_emb, whose rotary dim is cos.shape[-1]).
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import GPTNeoXConfig
    from transformers.models.gpt_neox.modeling_gpt_neox import (
        GPTNeoXRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    case, params = _load("rope", name)
    dim, rotary_dim = case.inputs["x"].shape[-1], params["rotary_dim"]
    config = GPTNeoXConfig(
        hidden_size=dim, num_attention_heads=1,
        rope_parameters={"rope_type": "default", "rope_theta": float(params["base"]),
                         "partial_rotary_factor": rotary_dim / dim},
    )
    _check_hf(name, GPTNeoXRotaryEmbedding, apply_rotary_pos_emb, config, rotary_dim)
    # the pass-through tail is copied exactly
    np.testing.assert_array_equal(case.output[..., rotary_dim:],
                                  case.inputs["x"][..., rotary_dim:])


# --------------------------------------------------------------------------------------------
# 2. ONNX RotaryEmbedding (opset 23), run by onnx.reference.ReferenceEvaluator in float64
# --------------------------------------------------------------------------------------------

ONNX_ALL = _cases("rope", lambda p: p["scaling"] is None)  # ONNX's caches: default theta


def _onnx_rope(x, cos_cache, sin_cache, position_ids, *, interleaved, rotary_dim, num_heads):
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    attrs = {"interleaved": int(interleaved), "rotary_embedding_dim": int(rotary_dim)}
    if num_heads is not None:
        attrs["num_heads"] = int(num_heads)
    node = helper.make_node("RotaryEmbedding", ["X", "cos_cache", "sin_cache", "position_ids"],
                            ["Y"], **attrs)
    dbl, i64 = TensorProto.DOUBLE, TensorProto.INT64
    graph = helper.make_graph(
        [node], "rope",
        [helper.make_tensor_value_info("X", dbl, list(x.shape)),
         helper.make_tensor_value_info("cos_cache", dbl, list(cos_cache.shape)),
         helper.make_tensor_value_info("sin_cache", dbl, list(sin_cache.shape)),
         helper.make_tensor_value_info("position_ids", i64, list(position_ids.shape))],
        [helper.make_tensor_value_info("Y", dbl, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    (y,) = ReferenceEvaluator(model).run(
        None, {"X": x, "cos_cache": cos_cache, "sin_cache": sin_cache,
               "position_ids": position_ids})
    return np.asarray(y)


@pytest.mark.parametrize("name", ONNX_ALL)
def test_rope_vs_onnx_reference(name):
    onnx = pytest.importorskip("onnx")
    if "RotaryEmbedding" not in {s.name for s in onnx.defs.get_all_schemas()}:
        pytest.skip(f"onnx {onnx.__version__} has no RotaryEmbedding operator (opset 23)")
    case, params = _load("rope", name)
    x, positions = case.inputs["x"], case.inputs["positions"]
    dim = x.shape[-1]
    r = dim if params["rotary_dim"] is None else params["rotary_dim"]
    x4, pos = _as_bhsd(x, positions)
    # ONNX indexes the caches by position_ids, which the operator defines on
    # [0, max_position_id_plus_1); numpy would wrap a negative id to the end of the cache.
    # Row j of the cache holds the j-th distinct position and position_ids index those rows:
    # negative positions stay representable and positions near 2^20 need no 2^20-row cache.
    rows, ids = np.unique(pos, return_inverse=True)
    ids = ids.reshape(pos.shape).astype(np.int64)
    theta = float(params["base"]) ** (-2.0 * np.arange(r // 2) / r)  # theta_i = base^(-2i/r)
    angles = rows.astype(np.float64)[:, None] * theta[None, :]  # [distinct positions, r/2]
    cos_cache, sin_cache = np.cos(angles), np.sin(angles)
    kwargs = {"interleaved": params["layout"] == "interleaved", "rotary_dim": r}
    # Both sides run in float64; theta_i and the angles may still differ by an ulp or two (pow
    # and cos of numpy vs the reference), which grows with the angle: allow a few eps64 * angle.
    max_angle = float(np.max(np.abs(pos), initial=0))
    atol = 1e-12 + 8 * F64_EPS * max_angle * float(np.max(np.abs(x), initial=0))

    # 4-D form: X [batch, num_heads, seq, head_size]
    y4 = _onnx_rope(x4, cos_cache, sin_cache, ids, num_heads=None, **kwargs)
    np.testing.assert_allclose(y4.reshape(x.shape), case.output, rtol=1e-12, atol=atol,
                               err_msg=f"rope/{name} vs ONNX RotaryEmbedding (4-D input)")
    # 3-D form: X [batch, seq, num_heads * head_size] with the num_heads attribute
    batch, heads, seq, _ = x4.shape
    x3 = np.ascontiguousarray(x4.transpose(0, 2, 1, 3).reshape(batch, seq, heads * dim))
    y3 = _onnx_rope(x3, cos_cache, sin_cache, ids, num_heads=heads, **kwargs)
    y3 = y3.reshape(batch, seq, heads, dim).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(y3.reshape(x.shape), case.output, rtol=1e-12, atol=atol,
                               err_msg=f"rope/{name} vs ONNX RotaryEmbedding (3-D input)")


# --------------------------------------------------------------------------------------------
# 3. keras-hub SinePositionEncoding (interleaved sinusoidal table)
# --------------------------------------------------------------------------------------------

KERAS_CASES = _cases("sinusoidal", lambda p: p["layout"] == "interleaved")


def _zero_padding_rows(table: np.ndarray, positions: np.ndarray, padding_idx) -> np.ndarray:
    """fairseq's padding rule on top of a peer without padding_idx: the rows of positions equal
    to padding_idx are zeros, every other row (positions below padding_idx too) is the peer's."""
    if padding_idx is None:
        return table
    return np.where((positions == padding_idx)[..., None], 0.0, table)


@pytest.fixture(scope="module")
def keras_hub():
    try:
        return pytest.importorskip("keras_hub", reason="keras-hub is not installed")
    except pytest.skip.Exception:
        raise
    except Exception as exc:  # TensorFlow/Keras can fail to import in odd ways
        pytest.skip(f"keras_hub cannot be imported here: {type(exc).__name__}: {exc}")


@pytest.mark.parametrize("name", KERAS_CASES)
def test_sinusoidal_interleaved_vs_keras_hub(name, keras_hub):
    from keras import ops

    case, params = _load("sinusoidal", name)
    positions = case.inputs["positions"]
    dim = params["dim"]
    flat = positions.reshape(-1)
    n = flat.size
    layer = keras_hub.layers.SinePositionEncoding(max_wavelength=float(params["base"]))
    zeros = np.zeros((1, n, dim), dtype=np.float32)
    if np.array_equal(flat, np.arange(n)):
        out = layer(zeros)  # the layer's own positions: arange(seq)
    elif "positions" in inspect.signature(layer.call).parameters:
        out = layer(zeros, positions=flat[None, :].astype(np.float32))
    else:
        pytest.skip("positions are not arange(n) and this keras-hub's SinePositionEncoding "
                    "takes no positions argument")
    got = np.asarray(ops.convert_to_numpy(out), dtype=np.float64).reshape(case.output.shape)
    got = _zero_padding_rows(got, positions, params["padding_idx"])
    # float32 compute: the angle k * omega_i has an error of a few eps32 * k (omega_0 = 1)
    atol = 1e-6 + 4 * F32_EPS * float(np.max(np.abs(flat), initial=0))
    np.testing.assert_allclose(got, case.output, rtol=0, atol=atol,
                               err_msg=f"sinusoidal/{name} vs keras_hub SinePositionEncoding")


MARIAN_CASES = _cases("sinusoidal", lambda p: p["layout"] == "concat" and p["base"] == 10000.0)


@pytest.mark.parametrize("name", MARIAN_CASES)
def test_sinusoidal_concat_vs_transformers_marian(name):
    """transformers' MarianSinusoidalPositionalEmbedding table (sin half, then cos half; base
    10000 fixed), computed in float64 and stored in float32; padding_idx as fairseq's rule."""
    torch = pytest.importorskip("torch")
    marian = pytest.importorskip("transformers.models.marian.modeling_marian")
    case, params = _load("sinusoidal", name)
    positions = case.inputs["positions"]
    layer = marian.MarianSinusoidalPositionalEmbedding(int(positions.max()) + 1, params["dim"])
    with torch.no_grad():
        table = layer.create_weight().to(torch.float64).numpy()
    expected = _zero_padding_rows(table[positions], positions, params["padding_idx"])
    np.testing.assert_allclose(case.output, expected, rtol=0, atol=F32_EPS,
                               err_msg=f"sinusoidal/{name} vs transformers Marian table")


# --------------------------------------------------------------------------------------------
# 4. torch.nn.functional.embedding (learned table lookup)
# --------------------------------------------------------------------------------------------

LEARNED_CASES = _cases("learned", lambda p: True)


@pytest.mark.parametrize("name", LEARNED_CASES)
def test_learned_vs_torch_embedding(name):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    case, params = _load("learned", name)
    positions, table = case.inputs["positions"], case.inputs["table"]
    max_len = table.shape[0]
    idx = torch.from_numpy(positions.astype(np.int64))
    if params["out_of_range"] == "clip":
        idx = idx.clamp(0, max_len - 1)
    elif params["out_of_range"] == "error":
        assert ((positions >= 0) & (positions < max_len)).all(), \
            f"learned/{name}: an 'error' case with positions outside [0, {max_len})"
    else:
        pytest.skip(f"no torch oracle for out_of_range={params['out_of_range']!r}")
    expected = F.embedding(idx, torch.from_numpy(table)).numpy()
    assert expected.dtype == np.float64
    np.testing.assert_array_equal(case.output, expected,
                                  err_msg=f"learned/{name} vs torch F.embedding")


# --------------------------------------------------------------------------------------------
# 6. RoPE in other peers: keras-hub RotaryEmbedding (half), rotary-embedding-torch (interleaved)
# --------------------------------------------------------------------------------------------


def _linear_factor(params: dict) -> float | None:
    """The position-interpolation factor of a case (1 without scaling), None for other kinds."""
    scaling = params["scaling"]
    if scaling is None:
        return 1.0
    kind = scaling.get("rope_type", scaling.get("type"))
    return float(scaling["factor"]) if kind == "linear" and len(scaling) == 2 else None


KERAS_ROPE = _cases("rope", lambda p: p["layout"] == "half" and p["rotary_dim"] is None
                    and _linear_factor(p) is not None)


@pytest.mark.parametrize("name", KERAS_ROPE)
def test_rope_half_vs_keras_hub(name, keras_hub):
    from keras import ops

    case, params = _load("rope", name)
    x, positions = case.inputs["x"], case.inputs["positions"]
    x4, pos = _as_bhsd(x, positions)
    layer = keras_hub.layers.RotaryEmbedding(
        max_wavelength=float(params["base"]), scaling_factor=_linear_factor(params),
        sequence_axis=1, feature_axis=-1, dtype="float64")
    # keras-hub takes [batch, seq, heads, dim]; positions [batch, seq] (float32 angles)
    inputs = np.ascontiguousarray(x4.transpose(0, 2, 1, 3))
    out = ops.convert_to_numpy(layer(inputs, positions=pos.astype(np.float32)))
    got = out.transpose(0, 2, 1, 3).reshape(x.shape)
    np.testing.assert_allclose(got, case.output, rtol=0, atol=_f32_rope_atol(pos, x),
                               err_msg=f"rope/{name} vs keras_hub RotaryEmbedding")


def test_keras_hub_dynamic_is_not_ntk(keras_hub):
    """Divergence found (keras-hub 0.32): RotaryEmbedding(rope_type="dynamic") divides every
    frequency by s^(d/(d-2)), i.e. linear interpolation by that factor, where NTK-aware
    scaling raises the base (theta_0 = 1 unchanged, theta_i divided by s^(2i/(d-2))).
    The peer is checked against the NTK rule written here, not against posenc."""
    from keras import ops

    dim, s = 16, 4.0
    layer = keras_hub.layers.RotaryEmbedding(scaling_factor=s, rope_type="dynamic",
                                             dtype="float64")
    inv = ops.convert_to_numpy(layer._get_inverse_freq(dim)).astype(np.float64)
    plain = 10000.0 ** (-2.0 * np.arange(dim // 2) / dim)
    ntk = (10000.0 * s ** (dim / (dim - 2))) ** (-2.0 * np.arange(dim // 2) / dim)
    np.testing.assert_allclose(inv, plain / s ** (dim / (dim - 2)), rtol=1e-6)
    assert abs(inv[0] - ntk[0]) > 0.5  # NTK keeps theta_0 = 1; keras-hub gives s^(-d/(d-2))


RET_ROPE = _cases("rope", lambda p: p["layout"] == "interleaved"
                  and _linear_factor(p) is not None)


@pytest.mark.parametrize("name", RET_ROPE)
def test_rope_interleaved_vs_rotary_embedding_torch(name):
    torch = pytest.importorskip("torch")
    ret = pytest.importorskip("rotary_embedding_torch")

    case, params = _load("rope", name)
    x, positions = case.inputs["x"], case.inputs["positions"]
    dim = x.shape[-1]
    r = dim if params["rotary_dim"] is None else params["rotary_dim"]
    rotary = ret.RotaryEmbedding(dim=r, theta=float(params["base"]),
                                 interpolate_factor=_linear_factor(params))
    xt = torch.from_numpy(np.ascontiguousarray(x))
    seq = x.shape[-2]
    pos = np.arange(seq) if positions is None else positions
    if pos.ndim == 1:
        freqs = rotary(torch.from_numpy(pos.astype(np.float32)) / rotary.interpolate_factor)
        got = ret.apply_rotary_emb(freqs.double(), xt).numpy()
    else:  # batched positions: one call per batch row
        got = np.stack([ret.apply_rotary_emb(
            rotary(torch.from_numpy(p.astype(np.float32))).double(), xt[b]).numpy()
            for b, p in enumerate(pos)])
    np.testing.assert_allclose(got, case.output, rtol=0, atol=_f32_rope_atol(pos, x),
                               err_msg=f"rope/{name} vs rotary-embedding-torch")
