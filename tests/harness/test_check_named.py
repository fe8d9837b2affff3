"""``check(..., named=...)`` and ``posenc check --named``: a porter's rope checked on exactly
the published configuration of the model they port. The ported function builds its
frequencies with transformers' own ROPE_INIT_FUNCTIONS from the config it is given; planting a
wrong base makes the named case fail, and the report names it."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from posenc.catalog import specs
from posenc.conformance import check
from posenc.conformance import named as named_checks
from posenc.errors import ParameterError

from ..conftest import run_cli

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

# transformers computes inv_freq in float32: float32 checks under the conventional profile
FAST = {"dtypes": ["float32"], "gradients": False, "precision": "conventional"}
NAMES = {"positions": "position_ids", "scaling": "rope_parameters"}

PORTER = textwrap.dedent('''
    import torch
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    def ported_rope(x, position_ids, rope_parameters, theta=None):
        """Half-layout rope with transformers' frequencies for the config it is given;
        ``theta`` overrides the config's rope_theta (a porting bug when given)."""
        params = dict(rope_parameters)
        if theta is not None:
            params["rope_theta"] = theta
        positions = params.pop("max_position_embeddings", 131072)  # beside, in a config.json
        config = LlamaConfig(head_dim=x.shape[-1], hidden_size=4 * x.shape[-1],
                             num_attention_heads=4, rope_parameters=params,
                             max_position_embeddings=positions)
        inv_freq, attention = ROPE_INIT_FUNCTIONS[params["rope_type"]](config, "cpu")
        angles = position_ids.to(torch.float64)[..., None] * inv_freq.to(torch.float64)
        emb = torch.cat([angles, angles], dim=-1)
        x64 = x.to(torch.float64)
        half = x.shape[-1] // 2
        rotated = torch.cat([-x64[..., half:], x64[..., :half]], dim=-1)
        return ((x64 * emb.cos() + rotated * emb.sin()) * attention).to(x.dtype)

    def wrong_base_rope(x, position_ids, rope_parameters):
        return ported_rope(x, position_ids, rope_parameters, theta=10000.0)
''')


@pytest.fixture(scope="module")
def porter(tmp_path_factory: pytest.TempPathFactory) -> Any:
    import importlib.util

    path = tmp_path_factory.mktemp("porter") / "porter_named.py"
    path.write_text(PORTER)
    spec = importlib.util.spec_from_file_location("porter_named", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_named_selects_the_cases_of_the_published_config() -> None:
    rope = specs()["rope"]
    assert named_checks.cases(rope, "llama-3.1-8b") == ["named_llama_3_1_8b"]
    assert named_checks.cases(rope, "gemma-4-31b") == ["named_gemma_4_31b_sliding",
                                                       "named_gemma_4_31b_full"]
    assert named_checks.cases(specs()["ggml_rope"], "phi-3.5-mini") == [
        "phi3_5_mini_short", "phi3_5_mini_long"]


def test_a_ported_rope_passes_on_its_model(porter: Any) -> None:
    report = check(porter.ported_rope, "rope", names=NAMES, named="llama-3.1-8b", **FAST)
    assert report.passed, report.text()
    assert [r.check.name for r in report.results] == ["named_llama_3_1_8b"]
    # float32 angle arithmetic: judged element by element, each on its own bound (a case-wide
    # allowance reached 0.39 of the values at its longest position and judged nothing)
    result = report.results[0]
    assert result.status == "pass" and result.grade == "conventional", result.message
    elements = result.details["elements"]
    assert elements["judged"] >= elements["needed"] and elements["worst_fraction"] < 1


def test_a_wrong_base_fails_and_the_named_case_says_which_model(porter: Any) -> None:
    report = check(porter.wrong_base_rope, "rope", names=NAMES, named="llama-3.1-8b", **FAST)
    assert not report.passed
    assert [r.check.name for r in report.failed] == ["named_llama_3_1_8b"]
    assert "named_llama_3_1_8b" in report.text()


def test_several_models_and_the_other_checks_deselected(porter: Any) -> None:
    report = check(porter.ported_rope, "rope", names=NAMES,
                   named=["llama-3.1-8b", "ministral-3-8b"], **FAST)
    assert report.passed, report.text()
    assert sorted(r.check.name for r in report.results) == ["named_llama_3_1_8b",
                                                           "named_ministral_3_8b"]


@pytest.mark.parametrize(("named", "message"), [
    ("llama-9", r"named='llama-9' is not a named configuration \(known: deepseek-v3, "),
    ("qwen2.5-vl-7b", r"rope has no golden case of this configuration \(it has cases in: "
                      r"ggml_rope\)"),
])
def test_bad_named_is_an_error(porter: Any, named: str, message: str) -> None:
    with pytest.raises(ParameterError, match=message):
        check(porter.ported_rope, "rope", names=NAMES, named=named, **FAST)


@pytest.mark.slow
def test_cli_named(porter: Any) -> None:
    target = f"{Path(porter.__file__)}:wrong_base_rope"
    maps = ["--map", "positions=position_ids", "--map", "scaling=rope_parameters",
            "--dtype", "float32", "--precision", "conventional"]
    proc = run_cli("check", "rope", target, *maps, "--named", "llama-3.1-8b")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 of 1 checks in scope" in proc.stdout and "named_llama_3_1_8b" in proc.stdout
    good = run_cli("check", "rope", target.replace("wrong_base_rope", "ported_rope"), *maps,
                   "--named", "llama-3.1-8b")
    assert good.returncode == 0, good.stdout + good.stderr


def test_every_named_rope_case_is_some_models_published_config() -> None:
    """A named_* case whose parameters drift from named.py is selected by no model."""
    rope = specs()["rope"]
    selected = {c for m in named_checks.NAMED if m != "qwen2.5-vl-7b"
                for c in named_checks.cases(rope, m)}
    assert selected == {c.name for c in rope.cases if c.name.startswith("named_")}
    assert all(named_checks.cases(rope, m) for m in named_checks.NAMED if m != "qwen2.5-vl-7b")
