"""Diagnosis transforms of CoPE (the reference's private variants): registered into
:data:`posenc.diagnoses.TRANSFORMS`."""

from __future__ import annotations

from typing import Any

from .diagnoses import Arrays, Reference, Transform


def _variant(**bug: Any) -> Any:
    def apply(ref: Reference, inputs: Arrays, params: dict[str, Any]) -> Any:
        from .reference.cope import _cope

        return _cope(inputs["q"], inputs["k"], inputs["pos_emb"], **params, **bug)
    return apply


_INPUTS = ("q", "k", "pos_emb")

TRANSFORMS: dict[str, Transform] = {
    "cope_count_from_start": Transform(
        "positions summed over keys 0..j", _variant(count="from_start"), inputs=_INPUTS,
        modules=("cope",)),
    "cope_positions_not_clamped": Transform(
        "positions unclamped, rows past the table read 0", _variant(clamp=False),
        inputs=_INPUTS, modules=("cope",)),
    "cope_interpolation_weights_swapped": Transform(
        "p − ⌊p⌋ on the floor row", _variant(swap_weights=True), inputs=_INPUTS,
        modules=("cope",)),
}
