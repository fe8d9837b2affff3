"""RoPE porting bugs in the rotation itself: its direction, the rotated part of the head,
the positions used, and the precision of the angles."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest import mock

import numpy as np

from posenc.rotary import rotation

from .registry import IMPL, Group, kind, positions_of, without

MUTANTS = Group()


def _rope_reversed_interleaved(x: Any, positions: Any = None, *, layout: str = "half",
                               **kw: Any) -> Any:
    if layout != "interleaved" or kw.get("scaling"):
        return IMPL["rope"](x, positions, layout=layout, **kw)
    return IMPL["rope"](x, -positions_of(x, positions), layout=layout, **kw)


def _rope_ignores_rotary_dim(x: Any, positions: Any = None, *, rotary_dim: Any = None,
                             **kw: Any) -> Any:
    return IMPL["rope"](x, positions, **kw)


def _rope_halves_rotary_dim(x: Any, positions: Any = None, *, rotary_dim: Any = None,
                            **kw: Any) -> Any:
    return IMPL["rope"](x, positions, rotary_dim=None if rotary_dim is None else rotary_dim // 2,
                        **kw)


def _rope_drops_partial_factor(x: Any, positions: Any = None, *, scaling: Any = None,
                               **kw: Any) -> Any:
    return IMPL["rope"](x, positions, scaling=without(scaling, "partial_rotary_factor"), **kw)


def _frequencies_drop_partial_factor(dim: int, *, scaling: Any = None, **kw: Any) -> Any:
    return IMPL["rope_frequencies"](dim, scaling=without(scaling, "partial_rotary_factor"),
                                    **kw)


def _rope_pairs_across_whole_head(x: Any, positions: Any = None, *, layout: str = "half",
                                  rotary_dim: Any = None, **kw: Any) -> Any:
    """Partial rotary pairing (i, i + dim/2) instead of (i, i + rotary_dim/2)."""
    dim = np.shape(x)[-1]
    if layout != "half" or rotary_dim is None or rotary_dim == dim:
        return IMPL["rope"](x, positions, layout=layout, rotary_dim=rotary_dim, **kw)
    h = rotary_dim // 2
    first = [*range(h), *range(dim // 2, dim // 2 + h)]
    order = first + [i for i in range(dim) if i not in first]
    out = np.empty_like(np.asarray(x))
    out[..., order] = IMPL["rope"](np.asarray(x)[..., order], positions, layout=layout,
                                   rotary_dim=rotary_dim, **kw)
    return out


MUTANTS.add("rope_rotation_reversed",
            "ggml-org/llama.cpp#6033: Command-R's GPT-J style rotation ported with the sin sign "
            "flipped (stack([-x2, x1]) order)", ("rope",), rope=_rope_reversed_interleaved)
MUTANTS.add("rope_partial_rotary_ignored",
            "vllm-project/vllm#43770: partial_rotary_factor computed as 1 (rotary_dim = head_dim)",
            ("rope",), rope=_rope_ignores_rotary_dim)
MUTANTS.add("rope_rotary_dim_halved",
            "vllm-project/vllm#16904: GLM's rotary_dim halved again (//= 2 applied twice)",
            ("rope",), rope=_rope_halves_rotary_dim)
MUTANTS.add("partial_rotary_factor_in_dict_ignored",
            "huggingface/transformers#48682: the rotary embedding ignores partial_rotary_factor",
            ("rope", "rope_frequencies"), rope=_rope_drops_partial_factor,
            rope_frequencies=_frequencies_drop_partial_factor)
MUTANTS.add("partial_rotary_pairs_across_head",
            "apple/coreai-models#66: partial rotary pairs (i, i + head_dim/2), transformers pairs "
            "(i, i + rotary_dim/2)", ("rope",), rope=_rope_pairs_across_whole_head)


def _rope_positions_ignored(x: Any, positions: Any = None, *, seq_len: Any = None,
                            scaling: Any = None, **kw: Any) -> Any:
    if kind(scaling) in ("dynamic", "longrope") and seq_len is None and positions is not None:
        seq_len = int(np.max(positions)) + 1
    return IMPL["rope"](x, None, seq_len=seq_len, scaling=scaling, **kw)


def _rope_first_row_positions(x: Any, positions: Any = None, **kw: Any) -> Any:
    if positions is not None and np.ndim(positions) == 2:
        positions = np.asarray(positions)[0]
    return IMPL["rope"](x, positions, **kw)


MUTANTS.add("rope_start_index_ignored",
            "keras-team/keras-hub#1544: LLaMA ignored start_index, rotating cached decoding from 0",
            ("rope",), rope=_rope_positions_ignored)
MUTANTS.add("rope_left_padding_ignored",
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


_PHASES = rotation.phases


def _with_phases(phases: Callable) -> Callable:
    def call(*args: Any, **kw: Any) -> Any:
        with mock.patch.object(rotation, "phases", phases):
            return IMPL["rope"](*args, **kw)
    return call


MUTANTS.add("rope_bf16_inv_freq",
            "huggingface/transformers#29496: Mistral's inv_freq left in bfloat16 under mixed "
            "precision", ("rope",), rope=_with_phases(_phases_bf16_inv_freq))
MUTANTS.add("rope_bf16_angles",
            "huggingface/transformers#29285: RoPE angles autocast to bfloat16 (Gemma/Llama)",
            ("rope",), rope=_with_phases(_phases_bf16_angles))
