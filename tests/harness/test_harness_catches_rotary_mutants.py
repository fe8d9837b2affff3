"""Broken rotary encodings must fail the harness: each mutant in tests/mutants/rotary.py is
caught by the goldens and by the property about that very convention."""

from __future__ import annotations

from ..failing import failing_by_encoding
from ..mutants import rotary

ROTARY = ["rope", "rope_frequencies"]


def failing(backend, dtype: str) -> dict[str, set[str]]:
    return failing_by_encoding(backend, dtypes=[dtype], max_examples=4, encodings=ROTARY)


def test_float32_angles_fail_the_precision_goldens_and_property() -> None:
    """m * theta in float32 (transformers, keras-hub, most ports) is 6e-3 off at 2^17."""
    found = failing(rotary.FLOAT32_ANGLES, "float32")
    assert set(found) == {"rope"}, found
    assert {"case:near_2_17", "case:near_2_20_llama3",
            "property:rope_phase_precision"} <= found["rope"], found
    assert "case:half_default_positions" not in found["rope"]  # small positions are fine
    assert failing(rotary.FLOAT32_ANGLES, "float64") == {}  # float64 angles are exact enough


def test_bfloat16_positions_are_caught() -> None:
    found = failing(rotary.BF16_POSITIONS, "float32")
    assert {"case:near_2_17", "case:decode_one_token",
            "property:rope_phase_precision"} <= found["rope"], found


def test_longrope_switching_at_the_trained_length_is_caught() -> None:
    found = failing(rotary.LONGROPE_INCLUSIVE, "float64")
    assert found == {"rope_frequencies": {"case:longrope_at_trained_length",
                                          "property:rope_frequencies_longrope_switch"}}, found


def test_yarn_without_truncation_is_caught() -> None:
    found = failing(rotary.YARN_UNTRUNCATED, "float64")
    assert {"case:yarn_qwen2_5", "case:yarn_deepseek_v3"} <= found["rope_frequencies"], found
    assert "case:yarn_gpt_oss_no_truncate" not in found["rope_frequencies"]
    assert "case:yarn_attention_factor" in found["rope"], found


def test_a_dropped_attention_factor_is_caught() -> None:
    found = failing(rotary.NO_ATTENTION_FACTOR, "float64")
    assert set(found) == {"rope"}, found
    assert {"case:yarn_attention_factor", "case:longrope_short_at_runtime",
            "property:rope_attention_factor"} <= found["rope"], found
