"""vLLM's rope_type 'ntk' (fixed NTK, and Su's mixed NTK with mixed_b) and 'dynamic' with alpha
(Hunyuan) in vllm_rope_frequencies. vLLM is not installed here: the oracle is the formula
transcribed from vllm/model_executor/layers/rotary_embedding/ntk_scaling_rope.py (read at
91b4f8fbfcc33a9cb58456f3061dced32509af4f) and kexue.fm/archives/9706, rewritten below in a
different algebraic form and checked at hand-computed frequencies."""

from __future__ import annotations

import numpy as np
import pytest

import posenc
from posenc import golden
from posenc.catalog import specs
from posenc.dialects import from_vllm, to_vllm
from posenc.dialects.transformers import RopeLayer
from posenc.errors import ParameterError
from posenc.specs import resolve_params

HUNYUAN_A13B = {"alpha": 1000.0, "beta_fast": 32, "beta_slow": 1, "factor": 1.0,
                "mscale": 1.0, "mscale_all_dim": 1.0, "rope_type": "dynamic",
                "rope_theta": 10000.0}


def _case(name: str) -> tuple[np.ndarray, dict]:
    spec = specs()["vllm_rope_frequencies"]
    case = golden.load(spec).cases[name]
    return case.output, resolve_params(spec, case.params)


def _transcribed(head: int, rope: dict) -> np.ndarray:
    """exp(-a (j+1)^b) with a = ln s / (r/2)^b is s^(-((j+1)/(r/2))^b); the fixed rule is b = 1."""
    r = int(head * rope.get("partial_rotary_factor", 1.0))
    j = np.arange(r // 2)
    b = rope.get("mixed_b") or 1.0
    return rope["rope_theta"] ** (-2.0 * j / r) * rope["factor"] ** (-(((j + 1) / (r / 2)) ** b))


# (case, {pair index: value by hand}): 2^(-1/32) = 0.978572062; 1e4^(-63/64) / 4 = 2.88695e-5;
# 4^(-(1/64)^0.75) = exp(-ln 4 / 64^0.75) = 0.940572888; 8^(-(1/32)^0.625) = 0.787921323
BY_HAND = {
    "ntk_fixed": {0: 0.9785720620877, 31: 0.005773909923447, 63: 2.886954961723e-05},
    "ntk_mixed_b": {0: 0.9405728880702, 31: 0.005064224935713, 63: 2.886954961723e-05},
    "ntk_mixed_b_partial_rotary": {0: 0.7879213232770, 15: 3.998697873560e-04,
                                   31: 1.924908157574e-07},
}


@pytest.mark.oracle
@pytest.mark.parametrize("name", sorted(BY_HAND))
def test_golden_vs_transcribed_vllm_formula(name: str) -> None:
    output, params = _case(name)
    head, rope = params["head_size"], params["rope_parameters"]
    expected = _transcribed(head, rope)
    np.testing.assert_allclose(output[:-1], expected, rtol=1e-13, atol=0,
                               err_msg=f"vllm_rope_frequencies/{name} vs the transcription")
    assert output[-1] == 1.0
    for j, value in BY_HAND[name].items():
        assert output[j] == pytest.approx(value, rel=1e-12), (name, j)
    ours, attention = posenc.vllm_rope_frequencies(head, max_position=params["max_position"],
                                                   rope_parameters=rope, dtype=np.float64)
    np.testing.assert_allclose(ours, expected, rtol=1e-13, atol=0,
                               err_msg=f"posenc.vllm_rope_frequencies/{name} vs the transcription")
    assert attention == 1.0


def test_mixed_b_one_is_the_fixed_rule() -> None:
    fixed = {"rope_type": "ntk", "factor": 4.0, "rope_theta": 10000.0}
    a, _ = posenc.vllm_rope_frequencies(64, max_position=2048, rope_parameters=fixed,
                                        dtype=np.float64)
    b, _ = posenc.vllm_rope_frequencies(64, max_position=2048, dtype=np.float64,
                                        rope_parameters={**fixed, "mixed_b": 1.0})
    np.testing.assert_allclose(a, b, rtol=1e-14)


def test_vllm_ntk_is_not_posenc_ntk_and_to_vllm_keeps_posenc_ntk_exact() -> None:
    """vLLM's 'ntk' divides the first frequency by s^(2/r); posenc's NTK-aware ntk keeps it.
    to_vllm therefore sends posenc's ntk as default at base * s^(r/(r-2))."""
    ours = {"rope_type": "ntk", "factor": 4.0, "rope_theta": 10000.0}
    theirs, _ = posenc.vllm_rope_frequencies(64, max_position=2048, rope_parameters=ours,
                                             dtype=np.float64)
    aware, _ = posenc.rope_frequencies(64, scaling=ours, dtype=np.float64)
    assert aware[0] == 1.0 and theirs[0] == pytest.approx(4.0 ** (-2 / 64), rel=1e-14)
    kwargs = to_vllm(RopeLayer("all", 64, dict(ours), 2048))
    assert kwargs["rope_parameters"]["rope_type"] == "default"
    got, _ = posenc.vllm_rope_frequencies(64, max_position=2048, dtype=np.float64,
                                          rope_parameters=kwargs["rope_parameters"])
    np.testing.assert_allclose(got, aware, rtol=1e-14)
    with pytest.raises(ParameterError, match=r"vLLM's rope_type 'ntk' .* no transformers"):
        from_vllm({"rope_parameters": {**ours, "mixed_b": 0.75}})


def test_hunyuan_through_to_vllm_matches_transformers_ntk_alpha() -> None:
    output, params = _case("hunyuan_a13b_dynamic_alpha")
    hf, _ = posenc.rope_frequencies(128, scaling=HUNYUAN_A13B, dtype=np.float64)
    np.testing.assert_allclose(output[:-1], hf, rtol=1e-14)
    kwargs = to_vllm(RopeLayer("all", 128, dict(HUNYUAN_A13B), 32768))
    assert kwargs["rope_parameters"] == params["rope_parameters"]
    # the published dict as vLLM gets it, unused keys included: the same frequencies
    full, factor = posenc.vllm_rope_frequencies(128, max_position=32768, dtype=np.float64,
                                                rope_parameters=HUNYUAN_A13B)
    np.testing.assert_allclose(full, output[:-1], rtol=1e-14)
    assert factor == 1.0


@pytest.mark.parametrize(("rope", "message"), [
    ({"rope_type": "ntk"}, r"rope_type='ntk' is missing 'factor'"),
    ({"rope_type": "ntk", "factor": 4.0, "mixed_b": -1.0},
     r"rope_parameters\['mixed_b'\]=-1.0 must be a finite number > 0"),
    ({"rope_type": "ntk", "factor": 4.0, "beta_fast": 32},
     r"key 'beta_fast', which rope_type='ntk' does not use"),
    ({"rope_type": "dynamic", "alpha": 0.0},
     r"rope_parameters\['alpha'\]=0.0 must be a finite number > 0"),
    ({"rope_type": "dynamic", "alpha": 1e300},
     r"rope_parameters\['alpha'\]=1e\+300 with rope_type='dynamic': the scaled base .* overflows"),
    ({"rope_type": "dynamic", "alpha": 2.0, "low_freq_factor": 1.0},
     r"key 'low_freq_factor', which rope_type='dynamic' does not use"),
])
def test_bad_vllm_ntk(pe, rope, message) -> None:
    with pytest.raises(ParameterError, match=message):
        pe.vllm_rope_frequencies(8, max_position=64, rope_parameters=rope)
