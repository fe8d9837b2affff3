"""Porting bugs users reported to the trackers of peer projects, each planted in the NumPy
backend by overriding the public functions it touches (the harness must fail every one).

Every mutant cites the thread it was written from (``owner/repo#number``) in ``cite``; none
comes from posenc's own history. Schedule bugs patch ``rope_frequencies._SCHEDULES`` for the
duration of one call, so ``rope``, ``rope_frequencies`` and ``mrope`` all see the same bug.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from unittest import mock

import numpy as np

from posenc import rotary
from posenc.backends.backend import Backend
from posenc.encodings import public_functions

from .overrides import _mutant

_IMPL = public_functions()
_RF = importlib.import_module("posenc.encodings.rope_frequencies")
_ORIGINAL = dict(_RF._SCHEDULES)
_SCALED = ("rope", "rope_frequencies", "mrope")  # the functions that read a scaling dict


@dataclass(frozen=True)
class TrackerMutant:
    name: str
    cite: str  # owner/repo#number: the bug in one line
    encodings: tuple[str, ...]  # the specs that exercise the overridden functions
    backend: Backend


MUTANTS: list[TrackerMutant] = []


def _add(name: str, cite: str, encodings: tuple[str, ...], **overrides: Callable) -> None:
    MUTANTS.append(TrackerMutant(name, cite, encodings, _mutant(f"tracker_{name}", **overrides)))


@contextmanager
def _schedules(**patched: Callable) -> Iterator[None]:
    with mock.patch.dict(_RF._SCHEDULES, patched):
        yield


def _add_schedule_bug(name: str, cite: str, **patched: Callable) -> None:
    def wrap(fn: str) -> Callable:
        def call(*args: Any, **kw: Any) -> Any:
            with _schedules(**patched):
                return _IMPL[fn](*args, **kw)
        return call

    _add(name, cite, ("rope", "rope_frequencies", "mrope"), **{f: wrap(f) for f in _SCALED})


def _kind(scaling: Any) -> str | None:
    return None if not scaling else scaling.get("rope_type", scaling.get("type"))


def _positions(x: Any, positions: Any) -> np.ndarray:
    return np.arange(np.shape(x)[-2]) if positions is None else np.asarray(positions)


def _like(reference: Any, values: Any) -> Any:
    """``values`` as an array of ``reference``'s dtype (what the backend would have returned)."""
    return np.asarray(values).astype(np.asarray(reference).dtype)


# -- ALiBi -------------------------------------------------------------------------------------

def _geometric(n: int, max_bias: float, start: int = 1) -> np.ndarray:
    return 2.0 ** (-max_bias * np.arange(start, n + start) / n)


def _slopes_geometric_for_any_heads(n: int, max_bias: float) -> np.ndarray:
    return _geometric(n, max_bias)


def _slopes_exponent_off_by_one(n: int, max_bias: float) -> np.ndarray:
    closest = 2 ** int(math.log2(n))
    slopes = _geometric(closest, max_bias, start=0)
    extra = _geometric(2 * closest, max_bias, start=0)[0::2][: n - closest]
    return np.concatenate([slopes, extra])


def _slopes_even_extra_heads(n: int, max_bias: float) -> np.ndarray:
    closest = 2 ** int(math.log2(n))
    extra = _geometric(2 * closest, max_bias)[1::2][: n - closest]  # should be [0::2]
    return np.concatenate([_geometric(closest, max_bias), extra])


def _alibi_with_slopes(slopes_fn: Callable[[int, float], np.ndarray]) -> dict[str, Callable]:
    def slopes(num_heads: int, *, max_bias: float = 8.0, **kw: Any) -> Any:
        right = _IMPL["alibi_slopes"](num_heads, max_bias=max_bias, **kw)
        return _like(right, slopes_fn(num_heads, max_bias))

    def bias(num_heads: int, q_len: int, k_len: int, *, max_bias: float = 8.0, **kw: Any) -> Any:
        right = _IMPL["alibi_bias"](num_heads, q_len, k_len, max_bias=max_bias, **kw)
        true = _IMPL["alibi_slopes"](num_heads, max_bias=max_bias)
        ratio = slopes_fn(num_heads, max_bias) / np.asarray(true, dtype=np.float64)
        return _like(right, np.asarray(right, dtype=np.float64) * ratio[:, None, None])

    return {"alibi_slopes": slopes, "alibi_bias": bias}


_add("alibi_geometric_for_any_heads",
     "ml-explore/mlx#3071: 2^(-8h/n) for every n, right only when n is a power of two",
     ("alibi_slopes", "alibi_bias"), **_alibi_with_slopes(_slopes_geometric_for_any_heads))
_add("alibi_slope_exponent_off_by_one",
     "paiml/aprender#2143: slopes 2^(-8h/n) from h = 0 (head 0 gets slope 1)",
     ("alibi_slopes", "alibi_bias"), **_alibi_with_slopes(_slopes_exponent_off_by_one))
_add("alibi_even_extra_heads",
     "NVIDIA/TensorRT-LLM#1611: extra heads of a non-power-of-two count take the wrong half "
     "of the 2n sequence (slopes not decreasing)",
     ("alibi_slopes", "alibi_bias"), **_alibi_with_slopes(_slopes_even_extra_heads))


def _alibi_distance_off_by_one(num_heads: int, q_len: int, k_len: int, *,
                               form: str = "causal", max_bias: float = 8.0, **kw: Any) -> Any:
    right = _IMPL["alibi_bias"](num_heads, q_len, k_len, form=form, max_bias=max_bias, **kw)
    if form == "symmetric":
        return right
    slopes = np.asarray(_IMPL["alibi_slopes"](num_heads, max_bias=max_bias), dtype=np.float64)
    return _like(right, np.asarray(right, dtype=np.float64) - slopes[:, None, None])


def _alibi_queries_from_the_start(num_heads: int, q_len: int, k_len: int, *,
                                  form: str = "causal", max_bias: float = 8.0, **kw: Any) -> Any:
    right = _IMPL["alibi_bias"](num_heads, q_len, k_len, form=form, max_bias=max_bias, **kw)
    if form == "key_only" or q_len == k_len:
        return right
    slopes = np.asarray(_IMPL["alibi_slopes"](num_heads, max_bias=max_bias), dtype=np.float64)
    distance = np.arange(q_len)[:, None] - np.arange(k_len)[None, :]  # query r at position r
    distance = np.abs(distance) if form == "symmetric" else distance
    return _like(right, -slopes[:, None, None] * distance)


_add("alibi_distance_off_by_one",
     "vllm-project/vllm#945: paged-attention ALiBi used token_idx - context_len (one short)",
     ("alibi_bias",), alibi_bias=_alibi_distance_off_by_one)
_add("alibi_cache_queries_at_start",
     "vllm-project/vllm#1009: with a KV cache the bias is measured from the first key, not "
     "from the query's own position",
     ("alibi_bias",), alibi_bias=_alibi_queries_from_the_start)


# -- RoPE geometry -----------------------------------------------------------------------------

def _rope_reversed_interleaved(x: Any, positions: Any = None, *, layout: str = "half",
                               **kw: Any) -> Any:
    if layout != "interleaved" or kw.get("scaling"):
        return _IMPL["rope"](x, positions, layout=layout, **kw)
    return _IMPL["rope"](x, -_positions(x, positions), layout=layout, **kw)


def _rope_ignores_rotary_dim(x: Any, positions: Any = None, *, rotary_dim: Any = None,
                             **kw: Any) -> Any:
    return _IMPL["rope"](x, positions, **kw)


def _rope_halves_rotary_dim(x: Any, positions: Any = None, *, rotary_dim: Any = None,
                            **kw: Any) -> Any:
    return _IMPL["rope"](x, positions, rotary_dim=None if rotary_dim is None else rotary_dim // 2,
                         **kw)


def _without(scaling: Any, *keys: str) -> Any:
    return scaling if not scaling else {k: v for k, v in scaling.items() if k not in keys}


def _rope_drops_partial_factor(x: Any, positions: Any = None, *, scaling: Any = None,
                               **kw: Any) -> Any:
    return _IMPL["rope"](x, positions, scaling=_without(scaling, "partial_rotary_factor"), **kw)


def _frequencies_drop_partial_factor(dim: int, *, scaling: Any = None, **kw: Any) -> Any:
    return _IMPL["rope_frequencies"](dim, scaling=_without(scaling, "partial_rotary_factor"),
                                     **kw)


def _rope_pairs_across_whole_head(x: Any, positions: Any = None, *, layout: str = "half",
                                  rotary_dim: Any = None, **kw: Any) -> Any:
    """Partial rotary pairing (i, i + dim/2) instead of (i, i + rotary_dim/2)."""
    dim = np.shape(x)[-1]
    if layout != "half" or rotary_dim is None or rotary_dim == dim:
        return _IMPL["rope"](x, positions, layout=layout, rotary_dim=rotary_dim, **kw)
    h = rotary_dim // 2
    first = [*range(h), *range(dim // 2, dim // 2 + h)]
    order = first + [i for i in range(dim) if i not in first]
    out = np.empty_like(np.asarray(x))
    out[..., order] = _IMPL["rope"](np.asarray(x)[..., order], positions, layout=layout,
                                    rotary_dim=rotary_dim, **kw)
    return out


_add("rope_rotation_reversed",
     "ggml-org/llama.cpp#6033: Command-R's GPT-J style rotation ported with the sin sign "
     "flipped (stack([-x2, x1]) order)", ("rope",), rope=_rope_reversed_interleaved)
_add("rope_partial_rotary_ignored",
     "vllm-project/vllm#43770: partial_rotary_factor computed as 1 (rotary_dim = head_dim)",
     ("rope",), rope=_rope_ignores_rotary_dim)
_add("rope_rotary_dim_halved",
     "vllm-project/vllm#16904: GLM's rotary_dim halved again (//= 2 applied twice)",
     ("rope",), rope=_rope_halves_rotary_dim)
_add("partial_rotary_factor_in_dict_ignored",
     "huggingface/transformers#48682: the rotary embedding ignores partial_rotary_factor",
     ("rope", "rope_frequencies"), rope=_rope_drops_partial_factor,
     rope_frequencies=_frequencies_drop_partial_factor)
_add("partial_rotary_pairs_across_head",
     "apple/coreai-models#66: partial rotary pairs (i, i + head_dim/2), transformers pairs "
     "(i, i + rotary_dim/2)", ("rope",), rope=_rope_pairs_across_whole_head)


def _rope_positions_ignored(x: Any, positions: Any = None, *, seq_len: Any = None,
                            scaling: Any = None, **kw: Any) -> Any:
    if _kind(scaling) in ("dynamic", "longrope") and seq_len is None and positions is not None:
        seq_len = int(np.max(positions)) + 1
    return _IMPL["rope"](x, None, seq_len=seq_len, scaling=scaling, **kw)


def _rope_first_row_positions(x: Any, positions: Any = None, **kw: Any) -> Any:
    if positions is not None and np.ndim(positions) == 2:
        positions = np.asarray(positions)[0]
    return _IMPL["rope"](x, positions, **kw)


_add("rope_start_index_ignored",
     "keras-team/keras-hub#1544: LLaMA ignored start_index, rotating cached decoding from 0",
     ("rope",), rope=_rope_positions_ignored)
_add("rope_left_padding_ignored",
     "huggingface/transformers#22161: GPT-NeoX rotary ignores per-row position_ids of a "
     "left-padded batch", ("rope",), rope=_rope_first_row_positions)


def _phases_bf16_inv_freq(xp: Any, positions: Any, inv_freq: Any, **kw: Any) -> Any:
    import ml_dtypes

    rounded = np.asarray(inv_freq, dtype=np.float64).astype(ml_dtypes.bfloat16)
    return _PHASES(xp, positions, [float(v) for v in rounded.astype(np.float64)], **kw)


def _phases_bf16_angles(xp: Any, positions: Any, inv_freq: Any, **kw: Any) -> Any:
    import ml_dtypes

    angles = np.asarray(_PHASES(xp, positions, inv_freq, **kw))
    return xp.asarray(angles.astype(ml_dtypes.bfloat16).astype(angles.dtype))


_PHASES = rotary.phases


def _with_phases(phases: Callable) -> Callable:
    def call(*args: Any, **kw: Any) -> Any:
        with mock.patch.object(rotary, "phases", phases):
            return _IMPL["rope"](*args, **kw)
    return call


_add("rope_bf16_inv_freq",
     "huggingface/transformers#29496: Mistral's inv_freq left in bfloat16 under mixed "
     "precision", ("rope",), rope=_with_phases(_phases_bf16_inv_freq))
_add("rope_bf16_angles",
     "huggingface/transformers#29285: RoPE angles autocast to bfloat16 (Gemma/Llama)",
     ("rope",), rope=_with_phases(_phases_bf16_angles))


# -- rope scaling schedules --------------------------------------------------------------------

def _yarn_without(*keys: str) -> Callable:
    def yarn(rd: int, base: float, scaling: Any, seq_len: Any) -> Any:
        return _ORIGINAL["yarn"](rd, base, _without(scaling, *keys), seq_len)
    return yarn


def _yarn_mscale_twice(rd: int, base: float, scaling: Any, seq_len: Any) -> Any:
    sched = _ORIGINAL["yarn"](rd, base, scaling, seq_len)
    factor = scaling.get("factor") or (scaling["max_position_embeddings"]
                                       / scaling["original_max_position_embeddings"])
    own = 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0
    return dataclasses.replace(sched, attention_factor=sched.attention_factor * own)


def _yarn_high_clamped_to_half(rd: int, base: float, scaling: Any, seq_len: Any) -> Any:
    """transformers' YaRN with the correction range's top clamped to rd/2 - 1, not rd - 1."""
    right = _ORIGINAL["yarn"](rd, base, scaling, seq_len)
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


_add_schedule_bug("yarn_attention_factor_ignored",
                  "vllm-project/vllm#46280: an explicit attention_factor is not forwarded; "
                  "0.1 ln s + 1 is used", yarn=_yarn_without("attention_factor"))
_add_schedule_bug("yarn_mscale_applied_twice",
                  "sgl-project/sglang#33558: the final attention factor multiplied again by "
                  "the port's own mscale", yarn=_yarn_mscale_twice)
_add_schedule_bug("yarn_mscale_ratio_ignored",
                  "vllm-project/vllm#48351: mscale / mscale_all_dim fallback not ported "
                  "(always 0.1 ln s + 1)", yarn=_yarn_without("mscale", "mscale_all_dim"))
_add_schedule_bug("yarn_betas_ignored",
                  "GaijinEntertainment/daScript#3479: YaRN betas hard-coded 32/1 instead of "
                  "read from the config", yarn=_yarn_without("beta_fast", "beta_slow"))
_add_schedule_bug("yarn_high_clamped_to_half",
                  "keras-team/keras-hub#2981: the correction range clamped to rotary_dim//2 - 1 "
                  "(reference: rotary_dim - 1)", yarn=_yarn_high_clamped_to_half)


def _llama3_smooth_in_wavelength(rd: int, base: float, scaling: Any, seq_len: Any) -> Any:
    right = _ORIGINAL["llama3"](rd, base, scaling, seq_len)
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


_add_schedule_bug("llama3_scaling_ignored",
                  "ggml-org/llama.cpp#8676: Llama 3.1 rope factors not applied before this PR "
                  "(issue #8650)", llama3=_ORIGINAL["default"])
_add_schedule_bug("llama3_smooth_in_wavelength",
                  "ml-explore/mlx-examples#907: the mid band interpolated in wavelength with the "
                  "weights reversed", llama3=_llama3_smooth_in_wavelength)


def _dynamic_with_length(length_of: Callable[[Any, Any, int], int]) -> Callable:
    def dynamic(rd: int, base: float, scaling: Any, seq_len: Any) -> Any:
        right = _ORIGINAL["dynamic"](rd, base, scaling, seq_len)
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


_add_schedule_bug("dynamic_ntk_below_trained_length",
                  "vllm-project/vllm#52675: dynamic NTK applied below the trained length "
                  "(no max(seq_len, trained))",
                  dynamic=_dynamic_with_length(lambda seq, f, trained: seq or trained))
_add_schedule_bug("dynamic_ntk_constant_factor",
                  "vllm-project/vllm#41277: dynamic NTK scaled for factor * trained length "
                  "whatever the sequence (a constant factor)",
                  dynamic=_dynamic_with_length(lambda seq, f, trained: int(f * trained)))
_add_schedule_bug("dynamic_ntk_never_reset",
                  "huggingface/transformers#46624: after a long sequence the scaled inv_freq "
                  "is kept for short ones", dynamic=_dynamic_with_length(_dynamic_never_reset))


def _rope_dynamic_positions_doubled(x: Any, positions: Any = None, *, scaling: Any = None,
                                    seq_len: Any = None, **kw: Any) -> Any:
    if _kind(scaling) != "dynamic":
        return _IMPL["rope"](x, positions, scaling=scaling, seq_len=seq_len, **kw)
    if seq_len is None:
        seq_len = int(np.max(_positions(x, positions))) + 1
    return _IMPL["rope"](x, 2 * _positions(x, positions), scaling=scaling, seq_len=seq_len,
                         **kw)


_add("dynamic_ntk_positions_doubled",
     "ml-explore/mlx-lm#1545: internlm3 passes scale 2.0 for rope_type dynamic, doubling "
     "every position", ("rope",), rope=_rope_dynamic_positions_doubled)


def _linear_multiplies(rd: int, base: float, scaling: Any, seq_len: Any) -> Any:
    right = _ORIGINAL["linear"](rd, base, scaling, seq_len)
    factor = scaling["factor"]
    return dataclasses.replace(right, inv_freq=tuple(v * factor * factor for v in right.inv_freq))


_add_schedule_bug("linear_scaling_inverted",
                  "keras-team/keras-hub#1605: scaling_factor applied to the frequencies the "
                  "wrong way (positions must be divided)", linear=_linear_multiplies)


def _longrope_by_allocated_context(rd: int, base: float, scaling: Any, seq_len: Any) -> Any:
    allocated = scaling.get("max_position_embeddings")
    return _ORIGINAL["longrope"](rd, base, scaling, allocated or seq_len)


def _longrope_long_only(rd: int, base: float, scaling: Any, seq_len: Any) -> Any:
    return _ORIGINAL["longrope"](rd, base, {**scaling, "short_factor": scaling["long_factor"]},
                                 seq_len)


_add_schedule_bug("longrope_by_allocated_context",
                  "ggml-org/llama.cpp#24823: long factors picked from the allocated context, "
                  "not the sequence", longrope=_longrope_by_allocated_context)
_add_schedule_bug("longrope_long_factors_only",
                  "lablup/mlxcel#1358: one table from long_factor used at every length",
                  longrope=_longrope_long_only)


def _rope_longrope_by_token_count(x: Any, positions: Any = None, *, scaling: Any = None,
                                  seq_len: Any = None, **kw: Any) -> Any:
    if _kind(scaling) == "longrope" and seq_len is None and positions is not None:
        seq_len = np.shape(x)[-2]  # the tokens of this call, not max(positions) + 1
    return _IMPL["rope"](x, positions, scaling=scaling, seq_len=seq_len, **kw)


def _rope_longrope_per_token(x: Any, positions: Any = None, *, scaling: Any = None,
                             seq_len: Any = None, **kw: Any) -> Any:
    if _kind(scaling) != "longrope" or seq_len is not None or positions is None:
        return _IMPL["rope"](x, positions, scaling=scaling, seq_len=seq_len, **kw)
    trained = scaling["original_max_position_embeddings"]
    short = _IMPL["rope"](x, positions, scaling=scaling, seq_len=trained, **kw)
    long = _IMPL["rope"](x, positions, scaling=scaling, seq_len=trained + 1, **kw)
    pos = np.asarray(positions)
    mask = (pos + 1 > trained)[..., None]
    if pos.ndim == 2 and np.ndim(x) == 4:
        mask = mask[:, None]
    return np.where(mask, long, short)


_add("longrope_switch_by_token_count",
     "ggml-org/llama.cpp#6849: Phi-3 long/short switch decided by the sequence offsets "
     "(token count), not the position ids", ("rope",), rope=_rope_longrope_by_token_count)
_add("longrope_switch_per_token",
     "vllm-project/vllm#6283: long factors chosen per token, where Phi-3 switches the whole "
     "batch on max(position_ids) + 1", ("rope",), rope=_rope_longrope_per_token)


def _mrope_interleaved_ignored(*args: Any, interleaved: bool = False, **kw: Any) -> Any:
    return _IMPL["mrope"](*args, interleaved=False, **kw)


_add("mrope_interleaved_as_chunked",
     "vllm-project/vllm-gaudi#1437: mrope_interleaved still used the chunked section mapping",
     ("mrope",), mrope=_mrope_interleaved_ignored)


# -- T5 buckets --------------------------------------------------------------------------------

def _t5_float_bucket(rel: np.ndarray, bidirectional: bool, num_buckets: int, max_distance: int,
                     *, clamp: bool = True, max_exact_of: Callable[[int], int] = lambda b: b // 2,
                     ) -> np.ndarray:
    """transformers' _relative_position_bucket, with switches for the reported variants."""
    rel = np.asarray(rel, dtype=np.int64)
    out = np.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        out += (rel > 0).astype(np.int64) * num_buckets
        n = np.abs(rel)
    else:
        n = -np.minimum(rel, 0)
    max_exact = max_exact_of(num_buckets)
    is_small = n < max_exact
    safe = np.maximum(n, 1).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        large = max_exact + (np.log(safe / max_exact) / math.log(max_distance / max_exact)
                             * (num_buckets - max_exact)).astype(np.int64)
    if clamp:
        large = np.minimum(large, num_buckets - 1)
    return out + np.where(is_small, n, large)


def _t5_overrides(**bucket_kw: Any) -> dict[str, Callable]:
    def bucket(relative_position: Any, *, bidirectional: bool = True, num_buckets: int = 32,
               max_distance: int = 128) -> Any:
        right = _IMPL["t5_bucket"](relative_position, bidirectional=bidirectional,
                                   num_buckets=num_buckets, max_distance=max_distance)
        return _like(right, _t5_float_bucket(relative_position, bidirectional, num_buckets,
                                             max_distance, **bucket_kw))

    def bias(q_len: int, k_len: int, table: Any, *, bidirectional: bool = True,
             num_buckets: int = 32, max_distance: int = 128, query_offset: int = 0) -> Any:
        right = _IMPL["t5_bias"](q_len, k_len, table, bidirectional=bidirectional,
                                 num_buckets=num_buckets, max_distance=max_distance,
                                 query_offset=query_offset)
        rel = np.arange(k_len)[None, :] - (query_offset + np.arange(q_len))[:, None]
        buckets = _t5_float_bucket(rel, bidirectional, num_buckets, max_distance, **bucket_kw)
        rows = np.asarray(table)
        buckets = np.clip(buckets, 0, rows.shape[0] - 1)  # an index error would be obvious
        return _like(right, np.moveaxis(rows[buckets], -1, 0))

    return {"t5_bucket": bucket, "t5_bias": bias}


def _t5_sign_flipped() -> dict[str, Callable]:
    def bucket(relative_position: Any, **kw: Any) -> Any:
        return _IMPL["t5_bucket"](-np.asarray(relative_position), **kw)

    def bias(q_len: int, k_len: int, table: Any, *, bidirectional: bool = True,
             num_buckets: int = 32, max_distance: int = 128, query_offset: int = 0) -> Any:
        right = _IMPL["t5_bias"](q_len, k_len, table, bidirectional=bidirectional,
                                 num_buckets=num_buckets, max_distance=max_distance,
                                 query_offset=query_offset)
        rel = (query_offset + np.arange(q_len))[:, None] - np.arange(k_len)[None, :]
        buckets = np.asarray(_IMPL["t5_bucket"](rel, bidirectional=bidirectional,
                                                num_buckets=num_buckets,
                                                max_distance=max_distance))
        return _like(right, np.moveaxis(np.asarray(table)[buckets], -1, 0))

    return {"t5_bucket": bucket, "t5_bias": bias}


def _t5_always_bidirectional() -> dict[str, Callable]:
    def bucket(relative_position: Any, *, bidirectional: bool = True, num_buckets: int = 32,
               **kw: Any) -> Any:
        return _IMPL["t5_bucket"](relative_position, bidirectional=num_buckets % 2 == 0,
                                  num_buckets=num_buckets, **kw)

    def bias(q_len: int, k_len: int, table: Any, *, bidirectional: bool = True,
             num_buckets: int = 32, **kw: Any) -> Any:
        return _IMPL["t5_bias"](q_len, k_len, table, bidirectional=num_buckets % 2 == 0,
                                num_buckets=num_buckets, **kw)

    return {"t5_bucket": bucket, "t5_bias": bias}


_add("t5_bucket_unclamped",
     "huggingface/candle#1312: the min(..., num_buckets - 1) of the log buckets left out",
     ("t5_bucket", "t5_bias"), **_t5_overrides(clamp=False))
_add("t5_max_exact_not_halved",
     "lucidrains/video-diffusion-pytorch#11: max_exact = buckets per side (the proposed "
     "'duplicate halving' fix)", ("t5_bucket", "t5_bias"),
     **_t5_overrides(max_exact_of=lambda b: b))
_add("t5_relative_sign_flipped",
     "lucidrains/x-transformers#10: relative position taken as query - key (sign flipped)",
     ("t5_bucket", "t5_bias"), **_t5_sign_flipped())
_add("t5_decoder_bidirectional",
     "huggingface/transformers#8518: a bidirectional bias used where attention is causal",
     ("t5_bucket", "t5_bias"), **_t5_always_bidirectional())


# -- sinusoidal --------------------------------------------------------------------------------

def _sinusoidal_cos_first(positions: Any, dim: int, *, layout: str = "interleaved",
                          **kw: Any) -> Any:
    out = _IMPL["sinusoidal"](positions, dim, layout=layout, **kw)
    if layout != "concat":
        return out
    out = np.asarray(out)
    sin, cos = out[..., : (dim + 1) // 2], out[..., (dim + 1) // 2:]
    return np.concatenate([cos, sin], axis=-1)


def _sinusoidal_half_minus_one(positions: Any, dim: int, *, layout: str = "interleaved",
                               **kw: Any) -> Any:
    if layout != "concat" or dim % 2 or dim < 4:
        return _IMPL["sinusoidal"](positions, dim, layout=layout, **kw)
    return _IMPL["sinusoidal"](positions, dim, layout="t2t", **kw)


_add("sinusoidal_cos_first",
     "flashinfer-ai/flashinfer#3819: timestep embedding halves swapped ([cos | sin])",
     ("sinusoidal",), sinusoidal=_sinusoidal_cos_first)
_add("sinusoidal_denominator_half_minus_one",
     "huggingface/blog#2183: frequencies log(10000)/(half_dim - 1) in a [sin | cos] table "
     "that divides by half_dim", ("sinusoidal",), sinusoidal=_sinusoidal_half_minus_one)
