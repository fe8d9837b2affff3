"""The library peers added for issue 30: x-transformers, litgpt, diffusers, Equinox, torchtune
(its own nox group: peers/envs/torchtune.txt), the reference implementations gpt-oss and
llama-models, and the scoreboard's merge of nox reports.

Each test skips without its library. Expected values are computed here in float64 from the
formulas (never copied from a run); the upstream findings (docs/known-issues.md) are shown by
the library disagreeing with that independent value.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from posenc.backends import get_backend
from posenc.backends.peers import ENGINES, PEERS
from posenc.conformance import Options, run
from posenc.conformance.reports import scoreboard
from posenc.conformance.runner import Runner
from posenc.errors import PosencError

from .test_engines import _float64_rope

RNG = np.random.default_rng(3030)


def _inv_freq(r: int, base: float) -> np.ndarray:
    return base ** (-np.arange(0, r, 2, dtype=np.float64) / r)


def _results(peer: str, encoding: str, dtype: str, names: set[str]) -> dict:
    options = Options(backends=[peer], encodings=[encoding], dtypes=[dtype], modes=["eager"],
                      max_examples=3, gradients=False, precision="reduced")
    with Runner(options) as runner:
        checks = [c for c in runner.plan() if f"{c.kind}:{c.name}" in names]
    return {f"{r.check.kind}:{r.check.name}": r for r in run(options, checks=checks)}


def test_the_new_peers_are_registered() -> None:
    for name in ("x-transformers", "litgpt", "diffusers", "equinox", "torchtune", "gpt-oss",
                 "llama-models"):
        assert name in PEERS
        backend = get_backend(f"peer:{name}")
        if not backend.available():
            with pytest.raises(ImportError, match=f"pip install {backend.missing()[1]}"):
                backend.namespace()
    assert len({**PEERS, **ENGINES}) >= 20  # the scoreboard of issue 30


# -- x-transformers ------------------------------------------------------------------------------
def test_x_transformers_rope_and_xpos_against_float64() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("x_transformers")
    from posenc.backends.peers.x_transformers import rope, xpos

    x = RNG.standard_normal((2, 3, 7, 16))
    pos = np.array([0, 1, 2, 3, 50, 51, 1000])
    for layout in ("half", "interleaved"):
        got = rope(torch.tensor(x, dtype=torch.float32), torch.tensor(pos), base=500.0,
                   layout=layout, rotary_dim=12).numpy()
        want = _float64_rope(x, pos, _inv_freq(12, 500.0), layout)
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-4)  # float32 angles m·θ
    # xPos keys: zeta_i ** -((n - c) / scale_base), c = (max n + 1) // 2 = 500
    zeta = (np.arange(0, 16, 2) / 16 + 0.4) / 1.4
    factor = zeta[None, :] ** (-(pos[:, None] - 500) / 64.0)
    want = _float64_rope(x, pos, _inv_freq(16, 10000.0), "interleaved")
    got = xpos(torch.tensor(x, dtype=torch.float32), torch.tensor(pos), kind="key",
               scale_base=64.0, centre=500.0).numpy()
    # the factor reaches 3.5 ** (500 / 64) ~ 2e4: compare the rotations it scales
    np.testing.assert_allclose(got / np.repeat(factor, 2, axis=-1), want, rtol=0, atol=2e-4)


def _width_two_divides_by_zero(peer: str, make: Any, scoped: bool = False) -> None:
    """A rotary width of 2 is a plain rotation by n·1 (θ_0 = 1): posenc's float64 rope gives it,
    ``make()`` (the library's 2-wide module) raises, and the peer's run reports the error, or
    (``scoped``: its adapter scopes its own known crash) unsupported with the reason."""
    import posenc

    x = RNG.standard_normal((3, 2))
    want = _float64_rope(x, np.arange(3), np.array([1.0]), "interleaved")
    np.testing.assert_allclose(posenc.rope(x, layout="interleaved"), want, atol=1e-12)
    with pytest.raises(ZeroDivisionError):
        make()
    result = _results(peer, "rope", "float32", {"case:two_dims"})
    if scoped:
        assert result["case:two_dims"].status == "unsupported"
        assert "RotaryEmbedding(dim=2) divides by zero" in result["case:two_dims"].message
        assert "docs/known-issues.md" in result["case:two_dims"].message
        return
    assert result["case:two_dims"].status == "error"  # reported, not scoped out
    assert "ZeroDivisionError" in result["case:two_dims"].message


def test_x_transformers_rotary_width_two_divides_by_zero() -> None:
    """x-transformers' NTK rescale ``base_rescale_factor ** (dim / (dim - 2))`` divides by zero
    for a width of 2, even at factor 1."""
    pytest.importorskip("torch")
    pytest.importorskip("x_transformers")
    from x_transformers.x_transformers import RotaryEmbedding

    _width_two_divides_by_zero("peer:x-transformers", lambda: RotaryEmbedding(2))


def test_rotary_embedding_torch_width_two_divides_by_zero() -> None:
    """rotary-embedding-torch 0.9.1 has x-transformers' rescale exponent dim / (dim - 2)."""
    pytest.importorskip("torch")
    pytest.importorskip("rotary_embedding_torch")
    from rotary_embedding_torch import RotaryEmbedding

    _width_two_divides_by_zero("peer:rotary-embedding-torch", lambda: RotaryEmbedding(dim=2),
                               scoped=True)


def test_rotary_embedding_torch_negative_offsets_are_out_of_its_domain() -> None:
    """Its offset counts cached tokens; below 0 its cache is read by negative slicing, which
    gives nothing (an error) or rows from the cache's end (silently wrong): posenc scopes a
    negative start with that reason."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("rotary_embedding_torch")
    from rotary_embedding_torch import RotaryEmbedding

    rotary = RotaryEmbedding(dim=8)
    rotary.rotate_queries_or_keys(torch.zeros(1, 64, 8), seq_dim=-2)  # fills the cache
    freqs = rotary(torch.arange(-10, -6, dtype=torch.float32), seq_len=4, offset=-10)
    inv = _inv_freq(8, 10000.0)
    want = np.repeat(np.arange(-10, -6)[:, None] * inv[None], 2, axis=-1)
    assert not np.allclose(freqs.double().numpy(), want, atol=1e-3)  # silently other rows
    result = _results("peer:rotary-embedding-torch", "rope", "float32",
                      {"case:far_negative_positions", "case:negative_positions"})
    for name in ("case:far_negative_positions", "case:negative_positions"):
        assert result[name].status == "unsupported"
        assert "offset counts cached tokens" in result[name].message


def test_x_transformers_t5_bucket_float32_log_tie() -> None:
    """Distance 2^17 with 64 buckets up to 2^20 (bidirectional): 16 + 16·log(2^17/16)/log(2^20/16)
    = 16 + 16·13/16 = 29 exactly, bucket 32 + 29 = 61; the float32 log truncates to 60."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("x_transformers")
    from posenc.backends.peers.x_transformers import t5_bucket

    exact = 32 + 16 + (16 * 13) // 16
    assert exact == 61 and math.isclose(math.log(2**17 / 16) / math.log(2**20 / 16), 13 / 16)
    got = t5_bucket(torch.tensor([2**17]), num_buckets=64, max_distance=2**20)
    assert int(got[0]) == 60


def test_x_transformers_alibi_is_the_symmetric_form() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("x_transformers")
    from posenc.backends.peers.x_transformers import alibi_bias

    slopes = np.array([2.0 ** (-8 * (h + 1) / 8) for h in range(8)])
    i = 7 - 3 + np.arange(3)  # the last 3 of 7 positions
    want = -slopes[:, None, None] * np.abs(i[:, None] - np.arange(7)[None, :])[None]
    got = alibi_bias(8, 3, 7, form="symmetric").numpy()
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=0)


# -- litgpt --------------------------------------------------------------------------------------
def test_litgpt_interleave_returns_the_pairs_deinterleaved() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("litgpt")
    from litgpt.model import apply_rope_interleave, build_rope_cache

    from posenc.backends.peers.litgpt import rope

    x = RNG.standard_normal((1, 5, 8))
    pos = np.arange(5)
    want = _float64_rope(x, pos, _inv_freq(8, 10000.0), "interleaved")
    cos, sin = build_rope_cache(5, 8)
    raw = apply_rope_interleave(torch.tensor(x, dtype=torch.float32), cos[None], sin[None])
    np.testing.assert_allclose(raw.numpy(), np.concatenate([want[..., 0::2], want[..., 1::2]],
                                                           -1), atol=1e-5)
    got = rope(torch.tensor(x, dtype=torch.float32), layout="interleaved").numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_litgpt_yarn_drops_the_attention_factor_without_mscale() -> None:
    """YaRN (and transformers) scale cos and sin by 0.1·ln(factor) + 1 when the config gives
    no mscale; litgpt's build_rope_cache keeps 1.0 (docs/known-issues.md)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("litgpt")
    from litgpt.model import build_rope_cache

    import posenc

    cos, sin = build_rope_cache(4, 32, base=1e6, extra_config={
        "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0, "original_max_seq_len": 32768})
    norm = float(torch.sqrt(cos[3] ** 2 + sin[3] ** 2).max())
    expected = 0.1 * math.log(4.0) + 1
    assert math.isclose(norm, 1.0, rel_tol=1e-6) and expected > 1.13
    x = np.ones((4, 32))
    out = np.asarray(posenc.rope(x, base=1e6, scaling={
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}))
    ratio = np.hypot(out[:, :16], out[:, 16:]) / np.hypot(x[:, :16], x[:, 16:])
    np.testing.assert_allclose(ratio, expected, rtol=1e-12)


# -- diffusers -----------------------------------------------------------------------------------
def test_diffusers_flux_axial_rope_and_sincos_against_float64() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("diffusers")
    from posenc.backends.peers.diffusers import axial_rope, sinusoidal

    x = RNG.standard_normal((2, 6, 24))
    ids = np.stack([np.zeros(6, int), np.arange(6) // 3, np.arange(6) % 3], -1)
    got = axial_rope(torch.tensor(x, dtype=torch.float32), torch.tensor(ids),
                     axes_dims=[8, 8, 8], layout="interleaved").numpy()
    want = np.concatenate([_float64_rope(x[..., 8 * a: 8 * a + 8], ids[:, a],
                                         _inv_freq(8, 10000.0), "interleaved")
                           for a in range(3)], -1)
    np.testing.assert_allclose(got, want, atol=2e-6)
    pos = np.array([0, 3, 4095])
    table = sinusoidal(torch.tensor(pos), 6, layout="concat", dtype=torch.float64).numpy()
    angles = pos[:, None] * 10000.0 ** (-np.arange(3) / 3)
    np.testing.assert_allclose(table, np.concatenate([np.sin(angles), np.cos(angles)], -1),
                               rtol=0, atol=1e-12)


# -- Equinox -------------------------------------------------------------------------------------
def test_equinox_rope_against_float64_and_its_theta_blind_cache() -> None:
    """eqx.nn.RotaryPositionalEmbedding caches cos/sin per (embedding_size, dtype), not theta:
    a second embedding of another theta reuses the first one's table (docs/known-issues.md)."""
    pytest.importorskip("equinox")
    import equinox as eqx
    import jax.numpy as jnp

    x = RNG.standard_normal((7, 6)).astype(np.float32)
    first = np.asarray(eqx.nn.RotaryPositionalEmbedding(6, theta=10000.0)(jnp.asarray(x)))
    want = _float64_rope(x, np.arange(7), _inv_freq(6, 10000.0), "half")
    np.testing.assert_allclose(first, want, atol=1e-5)
    other = np.asarray(eqx.nn.RotaryPositionalEmbedding(6, theta=2.0)(jnp.asarray(x)))
    want_other = _float64_rope(x, np.arange(7), _inv_freq(6, 2.0), "half")
    assert np.abs(want_other - want).max() > 1.0
    np.testing.assert_array_equal(other, first)  # the bug: theta=2 got theta=10000's table


# -- torchtune (nox -s torchtune) ----------------------------------------------------------------
def test_torchtune_llama3_scaled_rope_against_float64() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchtune", reason="pip install torchtune, or nox -s torchtune "
                        "(peers/envs/torchtune.txt)")
    import posenc
    from posenc.backends.peers.torchtune import rope

    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    inv_freq, _ = posenc.rope_frequencies(64, base=500000.0, scaling=scaling,
                                          dtype=np.float64)
    x = RNG.standard_normal((2, 4, 64))
    pos = np.array([0, 1, 17, 300])
    got = rope(torch.tensor(x, dtype=torch.float32), torch.tensor(pos), base=500000.0,
               scaling=scaling, layout="interleaved").numpy()
    np.testing.assert_allclose(got, _float64_rope(x, pos, np.asarray(inv_freq),
                                                  "interleaved"), atol=5e-5)


# -- gpt-oss (OpenAI's reference implementation) -----------------------------------------------
def _yarn_untruncated(r: int, base: float, factor: float, trained: int, fast: float,
                      slow: float) -> np.ndarray:
    """YaRN's inverse frequencies with the ramp's ends left fractional (truncate: False)."""
    theta = _inv_freq(r, base)

    def pair_index(rotations: float) -> float:  # the pair whose wavelength fits them in L0
        return r / 2 * math.log(trained / (rotations * 2 * math.pi)) / math.log(base)

    low, high = pair_index(fast), pair_index(slow)
    ramp = np.clip((np.arange(r // 2) - low) / (high - low), 0.0, 1.0)
    return theta * (1 - ramp) + theta / factor * ramp


def test_gpt_oss_yarn_against_float64() -> None:
    """gpt-oss-20b's YaRN (factor 32 over 4096, betas 32 and 1, no floor/ceil) with its
    concentration 0.1·ln(32) + 1 on cos and sin, against float64 from the formulas."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("gpt_oss", reason="pip install --no-deps gpt-oss")
    from posenc.backends.peers.gpt_oss import rope

    scaling = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
               "truncate": False, "original_max_position_embeddings": 4096}
    x = RNG.standard_normal((2, 5, 64))
    pos = np.array([0, 1, 17, 300, 301])
    got = rope(torch.tensor(x, dtype=torch.float32), torch.tensor(pos), base=150000.0,
               scaling=scaling).numpy()
    inv_freq = _yarn_untruncated(64, 150000.0, 32.0, 4096, 32.0, 1.0)
    want = (0.1 * math.log(32.0) + 1.0) * _float64_rope(x, pos, inv_freq, "half")
    np.testing.assert_allclose(got, want, atol=1e-4)
    plain = rope(torch.tensor(x, dtype=torch.float32), torch.tensor(pos), base=150000.0).numpy()
    np.testing.assert_allclose(plain, _float64_rope(x, pos, _inv_freq(64, 150000.0), "half"),
                               atol=1e-4)


def test_gpt_oss_declares_what_it_cannot_express() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("gpt_oss", reason="pip install --no-deps gpt-oss")
    from posenc.backends.peers.gpt_oss import rope
    from posenc.errors import Unsupported

    x = torch.zeros(4, 64)
    truncated = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096}
    for kwargs, reason in (({"scaling": truncated}, "truncate: False"),
                           ({"layout": "interleaved"}, "pairs"),
                           ({"rotary_dim": 32}, "whole head"),
                           ({"scaling": {"rope_type": "linear", "factor": 2.0}}, "YaRN only")):
        with pytest.raises(Unsupported, match=reason):
            rope(x, **kwargs)


# -- llama-models (Meta's reference code) ---------------------------------------------------------
def _llama31_float64(r: int, base: float) -> np.ndarray:
    """Llama 3.1's schedule (factor 8, low/high freq factors 1 and 4, 8192) in float64."""
    theta = _inv_freq(r, base)
    wavelength = 2 * math.pi / theta
    smooth = (8192 / wavelength - 1.0) / (4.0 - 1.0)
    blended = (1 - smooth) * theta / 8.0 + smooth * theta
    return np.where(wavelength < 8192 / 4.0, theta,
                    np.where(wavelength > 8192 / 1.0, theta / 8.0, blended))


LLAMA31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def _llama_models_rope() -> tuple:
    """torch and the adapter's rope, or a skip naming the packages."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("fairscale", reason="pip install --no-deps fairscale")
    pytest.importorskip("llama_models", reason="pip install --no-deps llama-models fairscale")
    from posenc.backends.peers.llama_models import rope

    return torch, rope


def test_llama_models_scaled_rope_against_float64() -> None:
    torch, rope = _llama_models_rope()
    scaling = LLAMA31
    x = RNG.standard_normal((2, 3, 4, 64))
    pos = np.array([[0, 1, 17, 300], [5, 6, 7, 250]])
    want = np.stack([_float64_rope(x[b], pos[b], _llama31_float64(64, 500000.0), layout)
                     for layout in ("interleaved", "half") for b in range(2)])
    got = np.stack([rope(torch.tensor(x, dtype=torch.float32), torch.tensor(pos),
                         base=500000.0, scaling=scaling, layout=layout).numpy()[b]
                    for layout in ("interleaved", "half") for b in range(2)])
    np.testing.assert_allclose(got, want, atol=5e-5)


def test_llama_models_scaling_constants_are_fixed() -> None:
    from posenc.errors import Unsupported

    torch, rope = _llama_models_rope()
    scaling = {**LLAMA31, "factor": 32.0}
    with pytest.raises(Unsupported, match="fixed constants"):
        rope(torch.zeros(4, 64), scaling=scaling, layout="interleaved")


# -- the scoreboard from reports -----------------------------------------------------------------
def test_a_report_round_trips_into_the_same_rows(tmp_path) -> None:
    pytest.importorskip("onnx")
    peer = get_backend("peer:onnx")
    here = scoreboard.run_here(peer, 2)
    path = scoreboard.write_report(here, tmp_path, 2)
    assert path.name == "peer-onnx.json"
    back = scoreboard.read_report(path, 2)
    assert back[3] == here[3] and back[4] == "peer-onnx.json"
    assert scoreboard.table(peer, back[1]) == scoreboard.table(peer, here[1])
    assert scoreboard.deviations(peer, back[1]) == scoreboard.deviations(peer, here[1])
    page = scoreboard.generate(["peer:onnx"], 2, reports=tmp_path)
    assert "*(report)*" in page and f"onnx {here[3]['onnx']}" in page


def test_a_stale_report_is_refused(tmp_path) -> None:
    pytest.importorskip("onnx")
    path = scoreboard.write_report(scoreboard.run_here(get_backend("peer:onnx"), 2),
                                   tmp_path, 2)
    with pytest.raises(PosencError, match="max_examples"):
        scoreboard.read_report(path, 3)
    data = json.loads(path.read_text())
    data["options"]["inputs_sha256"] = "0" * 64
    path.write_text(json.dumps(data))
    with pytest.raises(PosencError, match="inputs_sha256"):
        scoreboard.read_report(path, 2)


# -- mlx-lm (nox -s mlx) -------------------------------------------------------------------------
def test_mlx_lm_su_scaled_rope_ignores_short_factor() -> None:
    """LongRoPE below original_max_position_embeddings divides θ by short_factor (transformers,
    the Phi-3 reference); mlx-lm's SuScaledRoPE divides by long_factor at every length."""
    pytest.importorskip("mlx_lm", reason="pip install mlx-lm, or nox -s mlx (peers/envs/mlx.txt)")
    import mlx.core as mx
    from mlx_lm.models.rope_utils import SuScaledRoPE

    x = RNG.standard_normal((1, 1, 5, 8)).astype(np.float32)
    short, long = [1.0, 1.0, 1.0, 1.0], [4.0, 4.0, 4.0, 4.0]
    module = SuScaledRoPE(8, base=10000.0, max_position_embeddings=4096,
                          original_max_position_embeddings=4096, short_factor=short,
                          long_factor=long)
    got = np.array(module(mx.array(x)))
    theta = _inv_freq(8, 10000.0)
    want_short = _float64_rope(x, np.arange(5), theta / np.array(short), "half")
    want_long = _float64_rope(x, np.arange(5), theta / np.array(long), "half")
    assert np.abs(want_short - want_long).max() > 0.1
    np.testing.assert_allclose(got, want_long, atol=1e-5)  # long_factor, at 5 tokens of 4096
