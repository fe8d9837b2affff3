"""Properties of vLLM 0.32.0's rope frequencies: equal to transformers' where the translation
is exact; dynamic NTK and LongRoPE fixed by the server, not the sequence."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from posenc.dialects.transformers import RopeLayer
from posenc.dialects.vllm import to_vllm
from posenc.reference.rope_frequencies import rope_frequencies as transformers_reference

from ..context import CheckFailure, Context
from . import register


def frequencies(dim: int, base: float, scaling: dict, seq_len: int | None):
    """transformers' schedule (posenc's float64 reference): (inv_freq, attention_factor)."""
    return transformers_reference(dim=dim, base=base, scaling=scaling, seq_len=seq_len)

DIM = 64
TRANSFORMERS = {
    "default": {"rope_type": "default", "rope_theta": 10000.0},
    "linear": {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 1024,
               "rope_theta": 500000.0},
    "yarn": {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 2048,
             "beta_fast": 16.0, "beta_slow": 2.0, "rope_theta": 10000.0},
    "yarn_untruncated": {"rope_type": "yarn", "factor": 32.0, "truncate": False,
                         "original_max_position_embeddings": 4096, "rope_theta": 150000.0},
    "yarn_mscale": {"rope_type": "yarn", "factor": 16.0, "mscale": 0.707, "mscale_all_dim": 1.0,
                    "original_max_position_embeddings": 4096, "rope_theta": 10000.0},
    "yarn_attention": {"rope_type": "yarn", "factor": 8.0, "attention_factor": 1.25,
                       "original_max_position_embeddings": 2048, "rope_theta": 10000.0},
    "ntk": {"rope_type": "ntk", "factor": 4.0, "rope_theta": 10000.0},
    "ntk_alpha": {"rope_type": "dynamic", "alpha": 1000.0, "factor": 1.0, "beta_fast": 32,
                  "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0, "rope_theta": 10000.0},
}


def _run(ctx: Context, **params) -> tuple[np.ndarray, float]:
    out = ctx.run({}, **params)
    return out[:-1], float(out[-1])


def _close(ctx: Context, got: np.ndarray, expected: np.ndarray, what: str) -> None:
    ctx.assert_close(got, np.asarray(expected), what, scale=float(np.abs(expected).max()),
                     tol=ctx.tol.loosened(4))


@register("vllm_rope_frequencies_agree_with_transformers")
def agree_with_transformers(ctx: Context) -> None:
    """A transformers dict translated by posenc.dialects.to_vllm gives vLLM the frequencies and
    the attention factor transformers computes (default, linear, llama3, YaRN truncated or not,
    with mscale/mscale_all_dim, with an explicit attention_factor; posenc's
    NTK-aware ntk via default at the scaled base; Hunyuan's dynamic with alpha)."""

    @ctx.given(name=st.sampled_from(sorted(TRANSFORMERS)))
    def check(name: str) -> None:
        scaling = dict(TRANSFORMERS[name])
        kwargs = to_vllm(RopeLayer("all", DIM, dict(scaling), 131072))
        got, factor = _run(ctx, head_size=DIM, max_position=kwargs["max_position"],
                           rope_parameters=kwargs["rope_parameters"])
        expected, attention = frequencies(DIM, 10000.0, scaling, None)
        _close(ctx, got, expected, f"{name}: vLLM vs transformers frequencies")
        if abs(factor - attention) > 1e-12 * attention:
            raise CheckFailure(f"{name}: attention factor {factor!r}, transformers {attention!r}")


@register("vllm_rope_frequencies_dynamic_at_max_position")
def dynamic_at_max_position(ctx: Context) -> None:
    """vLLM 0.32's dynamic NTK is transformers' at seq_len = max_position with
    max_position_embeddings = max_trained_positions, for every sequence; without
    max_trained_positions (= max_position) the base is unchanged: the default frequencies."""
    for factor in (2.0, 4.0):
        params = {"rope_type": "dynamic", "factor": factor}
        got, _ = _run(ctx, head_size=DIM, max_position=8192,
                      rope_parameters={**params, "max_trained_positions": 2048})
        fixed, _ = frequencies(DIM, 10000.0, {**params, "max_position_embeddings": 2048}, 8192)
        _close(ctx, got, fixed, f"dynamic {factor:g}, 2048 trained: transformers at 8192")
        got, _ = _run(ctx, head_size=DIM, max_position=2048, rope_parameters=params)
        plain, _ = frequencies(DIM, 10000.0, {"rope_type": "default"}, None)
        _close(ctx, got, plain, f"dynamic {factor:g} without max_trained_positions: default")


@register("vllm_rope_frequencies_longrope_by_server")
def longrope_by_server(ctx: Context) -> None:
    """LongRoPE in vLLM: the long factors whenever max_model_len > original length (a 100-token
    request included), the short ones otherwise."""
    short = [1.0 + 0.05 * i for i in range(DIM // 2)]
    long = [1.5 + i for i in range(DIM // 2)]
    params = {"rope_type": "longrope", "short_factor": short, "long_factor": long,
              "original_max_position_embeddings": 4096}
    plain = 10000.0 ** (-2.0 * np.arange(DIM // 2) / DIM)
    for max_model_len, factors in ((4096, short), (4097, long), (131072, long), (1000, short)):
        got, factor = _run(ctx, head_size=DIM, max_position=131072, rope_parameters=params,
                           max_model_len=max_model_len)
        _close(ctx, got, plain / np.array(factors), f"longrope, max_model_len {max_model_len}")
        expected = float(np.sqrt(1 + np.log(131072 / 4096) / np.log(4096)))
        if abs(factor - expected) > 1e-12:
            raise CheckFailure(f"longrope attention factor {factor!r}, expected {expected!r}")
