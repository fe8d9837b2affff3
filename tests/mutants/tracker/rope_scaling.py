"""RoPE scaling porting bugs: YaRN, llama3, dynamic NTK, linear, LongRoPE and mrope's
interleaved sections. Schedule bugs patch one entry of ``rope_frequencies._SCHEDULES``."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .registry import IMPL, ORIGINAL, Group, kind, positions_of, without

MUTANTS = Group()


def _yarn_without(*keys: str) -> Callable:
    def yarn(rd: int, base: float, scaling: Any, seq_len: Any) -> Any:
        return ORIGINAL["yarn"](rd, base, without(scaling, *keys), seq_len)
    return yarn


def _yarn_mscale_twice(rd: int, base: float, scaling: Any, seq_len: Any) -> Any:
    sched = ORIGINAL["yarn"](rd, base, scaling, seq_len)
    factor = scaling.get("factor") or (scaling["max_position_embeddings"]
                                       / scaling["original_max_position_embeddings"])
    own = 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0
    return dataclasses.replace(sched, attention_factor=sched.attention_factor * own)


def _yarn_high_clamped_to_half(rd: int, base: float, scaling: Any, seq_len: Any) -> Any:
    """transformers' YaRN with the correction range's top clamped to rd/2 - 1, not rd - 1."""
    right = ORIGINAL["yarn"](rd, base, scaling, seq_len)
    factor = scaling.get("factor") or (scaling["max_position_embeddings"]
                                       / scaling["original_max_position_embeddings"])
    trained = scaling["original_max_position_embeddings"]
    fast, slow = scaling.get("beta_fast") or 32.0, scaling.get("beta_slow") or 1.0

    def correction_dim(rotations: float) -> float:
        return rd * math.log(trained / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(fast), correction_dim(slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rd // 2 - 1)
    if low == high:
        high += 0.001
    theta = [base ** (-2.0 * i / rd) for i in range(rd // 2)]
    ramps = [min(max((i - low) / (high - low), 0.0), 1.0) for i in range(rd // 2)]
    inv = tuple(t / factor * r + t * (1.0 - r) for t, r in zip(theta, ramps, strict=True))
    return dataclasses.replace(right, inv_freq=inv)


MUTANTS.add_schedule_bug("yarn_attention_factor_ignored",
                         "vllm-project/vllm#46280: an explicit attention_factor is not forwarded; "
                         "0.1 ln s + 1 is used", yarn=_yarn_without("attention_factor"))
MUTANTS.add_schedule_bug("yarn_mscale_applied_twice",
                         "sgl-project/sglang#33558: the final attention factor multiplied again by "
                         "the port's own mscale", yarn=_yarn_mscale_twice)
MUTANTS.add_schedule_bug("yarn_mscale_ratio_ignored",
                         "vllm-project/vllm#48351: mscale / mscale_all_dim fallback not ported "
                         "(always 0.1 ln s + 1)", yarn=_yarn_without("mscale", "mscale_all_dim"))
MUTANTS.add_schedule_bug("yarn_betas_ignored",
                         "GaijinEntertainment/daScript#3479: YaRN betas hard-coded 32/1 instead of "
                         "read from the config", yarn=_yarn_without("beta_fast", "beta_slow"))
MUTANTS.add_schedule_bug("yarn_high_clamped_to_half",
                         "keras-team/keras-hub#2981: the correction range clamped to rotary_dim//2 - 1 "
                         "(reference: rotary_dim - 1)", yarn=_yarn_high_clamped_to_half)


def _llama3_smooth_in_wavelength(rd: int, base: float, scaling: Any, seq_len: Any) -> Any:
    right = ORIGINAL["llama3"](rd, base, scaling, seq_len)
    factor, trained = scaling["factor"], scaling["original_max_position_embeddings"]
    low_wl = trained / scaling["low_freq_factor"]
    high_wl = trained / scaling["high_freq_factor"]

    def scaled(theta: float) -> float:
        wavelength = 2 * math.pi / theta
        if wavelength < high_wl:
            return theta
        if wavelength > low_wl:
            return theta / factor
        smooth = (wavelength - high_wl) / (low_wl - high_wl)
        return theta / ((1 - smooth) * factor + smooth)

    theta = [base ** (-2.0 * i / rd) for i in range(rd // 2)]
    return dataclasses.replace(right, inv_freq=tuple(scaled(t) for t in theta))


MUTANTS.add_schedule_bug("llama3_scaling_ignored",
                         "ggml-org/llama.cpp#8676: Llama 3.1 rope factors not applied before this PR "
                         "(issue #8650)", llama3=ORIGINAL["default"])
MUTANTS.add_schedule_bug("llama3_smooth_in_wavelength",
                         "ml-explore/mlx-examples#907: the mid band interpolated in wavelength with the "
                         "weights reversed", llama3=_llama3_smooth_in_wavelength)


def _dynamic_with_length(length_of: Callable[[Any, Any, int], int]) -> Callable:
    def dynamic(rd: int, base: float, scaling: Any, seq_len: Any) -> Any:
        right = ORIGINAL["dynamic"](rd, base, scaling, seq_len)
        factor = scaling["factor"]
        trained = scaling.get("max_position_embeddings") or scaling[
            "original_max_position_embeddings"]
        length = length_of(seq_len, factor, trained)
        scaled = base * ((factor * length / trained) - (factor - 1)) ** (rd / (rd - 2))
        return dataclasses.replace(right, inv_freq=tuple(
            scaled ** (-2.0 * i / rd) for i in range(rd // 2)))
    return dynamic


_SEEN: dict[tuple[Any, ...], int] = {}


def _dynamic_never_reset(seq_len: Any, factor: float, trained: int) -> int:
    key = (factor, trained)
    _SEEN[key] = max(_SEEN.get(key, 0), seq_len or trained)
    return max(_SEEN[key], trained)


MUTANTS.add_schedule_bug("dynamic_ntk_below_trained_length",
                         "vllm-project/vllm#52675: dynamic NTK applied below the trained length "
                         "(no max(seq_len, trained))",
                         dynamic=_dynamic_with_length(lambda seq, f, trained: seq or trained))
MUTANTS.add_schedule_bug("dynamic_ntk_constant_factor",
                         "vllm-project/vllm#41277: dynamic NTK scaled for factor * trained length "
                         "whatever the sequence (a constant factor)",
                         dynamic=_dynamic_with_length(lambda seq, f, trained: int(f * trained)))
MUTANTS.add_schedule_bug("dynamic_ntk_never_reset",
                         "huggingface/transformers#46624: after a long sequence the scaled inv_freq "
                         "is kept for short ones", dynamic=_dynamic_with_length(_dynamic_never_reset))


def _rope_dynamic_positions_doubled(x: Any, positions: Any = None, *, scaling: Any = None,
                                    seq_len: Any = None, **kw: Any) -> Any:
    if kind(scaling) != "dynamic":
        return IMPL["rope"](x, positions, scaling=scaling, seq_len=seq_len, **kw)
    if seq_len is None:
        seq_len = int(np.max(positions_of(x, positions))) + 1
    return IMPL["rope"](x, 2 * positions_of(x, positions), scaling=scaling, seq_len=seq_len,
                        **kw)


MUTANTS.add("dynamic_ntk_positions_doubled",
            "ml-explore/mlx-lm#1545: internlm3 passes scale 2.0 for rope_type dynamic, doubling "
            "every position", ("rope",), rope=_rope_dynamic_positions_doubled)


def _linear_multiplies(rd: int, base: float, scaling: Any, seq_len: Any) -> Any:
    right = ORIGINAL["linear"](rd, base, scaling, seq_len)
    factor = scaling["factor"]
    return dataclasses.replace(right, inv_freq=tuple(v * factor * factor for v in right.inv_freq))


MUTANTS.add_schedule_bug("linear_scaling_inverted",
                         "keras-team/keras-hub#1605: scaling_factor applied to the frequencies the "
                         "wrong way (positions must be divided)", linear=_linear_multiplies)


def _longrope_by_allocated_context(rd: int, base: float, scaling: Any, seq_len: Any) -> Any:
    allocated = scaling.get("max_position_embeddings")
    return ORIGINAL["longrope"](rd, base, scaling, allocated or seq_len)


def _longrope_long_only(rd: int, base: float, scaling: Any, seq_len: Any) -> Any:
    return ORIGINAL["longrope"](rd, base, {**scaling, "short_factor": scaling["long_factor"]},
                                seq_len)


MUTANTS.add_schedule_bug("longrope_by_allocated_context",
                         "ggml-org/llama.cpp#24823: long factors picked from the allocated context, "
                         "not the sequence", longrope=_longrope_by_allocated_context)
MUTANTS.add_schedule_bug("longrope_long_factors_only",
                         "lablup/mlxcel#1358: one table from long_factor used at every length",
                         longrope=_longrope_long_only)


def _rope_longrope_by_token_count(x: Any, positions: Any = None, *, scaling: Any = None,
                                  seq_len: Any = None, **kw: Any) -> Any:
    if kind(scaling) == "longrope" and seq_len is None and positions is not None:
        seq_len = np.shape(x)[-2]  # the tokens of this call, not max(positions) + 1
    return IMPL["rope"](x, positions, scaling=scaling, seq_len=seq_len, **kw)


def _rope_longrope_per_token(x: Any, positions: Any = None, *, scaling: Any = None,
                             seq_len: Any = None, **kw: Any) -> Any:
    if kind(scaling) != "longrope" or seq_len is not None or positions is None:
        return IMPL["rope"](x, positions, scaling=scaling, seq_len=seq_len, **kw)
    trained = scaling["original_max_position_embeddings"]
    short = IMPL["rope"](x, positions, scaling=scaling, seq_len=trained, **kw)
    long = IMPL["rope"](x, positions, scaling=scaling, seq_len=trained + 1, **kw)
    pos = np.asarray(positions)
    mask = (pos + 1 > trained)[..., None]
    if pos.ndim == 2 and np.ndim(x) == 4:
        mask = mask[:, None]
    return np.where(mask, long, short)


MUTANTS.add("longrope_switch_by_token_count",
            "ggml-org/llama.cpp#6849: Phi-3 long/short switch decided by the sequence offsets "
            "(token count), not the position ids", ("rope",), rope=_rope_longrope_by_token_count)
MUTANTS.add("longrope_switch_per_token",
            "vllm-project/vllm#6283: long factors chosen per token, where Phi-3 switches the whole "
            "batch on max(position_ids) + 1", ("rope",), rope=_rope_longrope_per_token)


def _mrope_interleaved_ignored(*args: Any, interleaved: bool = False, **kw: Any) -> Any:
    return IMPL["mrope"](*args, interleaved=False, **kw)


MUTANTS.add("mrope_interleaved_as_chunked",
            "vllm-project/vllm-gaudi#1437: mrope_interleaved still used the chunked section mapping",
            ("mrope",), mrope=_mrope_interleaved_ignored)
