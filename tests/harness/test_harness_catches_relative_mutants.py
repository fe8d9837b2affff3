"""Broken relative encodings must fail the harness: each mutant in tests/mutants/relative.py
is caught by the goldens and, where a property is about that very convention, by it too."""

from __future__ import annotations

from posenc.catalog import specs
from posenc.specs import resolve_params

from ..mutants import relative
from .test_harness_catches_mutants import failing

RELATIVE = ["t5_bucket", "t5_bias", "shaw_scores", "shaw_attention", "alibi_slopes",
            "alibi_bias", "transformer_xl"]


def test_flipped_relative_sign_is_caught() -> None:
    found = failing(relative.SIGN_FLIP, encodings=RELATIVE)
    assert set(found) == {"t5_bucket", "shaw_scores", "shaw_attention", "alibi_bias"}, found
    for encoding, names in found.items():
        assert any(n.startswith("case:") for n in names), (encoding, names)
    assert any(n.startswith("property:t5_bucket_range_and_sides") for n in found["t5_bucket"])
    assert any(n.startswith("property:shaw_scores_clipped_toeplitz")
               for n in found["shaw_scores"])
    assert any(n.startswith("property:alibi_bias_relative") for n in found["alibi_bias"])


def test_queries_aligned_to_the_start_of_the_cache_are_caught() -> None:
    found = failing(relative.START_ALIGNED, encodings=RELATIVE)
    assert set(found) == {"alibi_bias", "shaw_scores"}, found
    assert any(n.startswith("property:alibi_kv_cache_alignment") for n in found["alibi_bias"])
    assert any(n.startswith("property:shaw_kv_cache_rows") for n in found["shaw_scores"])


def test_naive_slopes_are_caught_exactly_for_other_head_counts() -> None:
    found = failing(relative.NAIVE_SLOPES, encodings=["alibi_slopes"])
    names = found["alibi_slopes"]
    assert any(n.startswith("property:alibi_slopes_sequence") for n in names), names
    # the naive formula is right for a power-of-two head count and wrong for any other
    spec = specs()["alibi_slopes"]
    heads = {c.name: resolve_params(spec, c.params)["num_heads"] for c in spec.cases}
    assert {n for n, h in heads.items() if h & (h - 1)} == {
        n.removeprefix("case:") for n in names if n.startswith("case:")}


def test_a_half_precision_bucket_log_is_caught() -> None:
    found = failing(relative.HALF_LOG, encodings=["t5_bucket"])
    assert "t5_bucket" in found and any(n.startswith("case:") for n in found["t5_bucket"])


def test_wrong_transformer_xl_base_is_caught() -> None:
    found = failing(relative.TXL_WRONG_BASE, encodings=["transformer_xl"])
    assert any(n.startswith("case:") for n in found["transformer_xl"]), found
