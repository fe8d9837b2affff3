"""The shaw_scores / shaw_attention goldens against the materialised tensor2tensor formulation."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.catalog import specs

from ..shaw_reference import golden_case, t2t_attention, t2t_scores


@pytest.mark.parametrize("name", [c.name for c in specs()["shaw_scores"].cases])
def test_scores_golden_vs_materialised_t2t(name) -> None:
    case, K, scale = golden_case("shaw_scores", name)
    i = case.inputs
    np.testing.assert_allclose(case.output, t2t_scores(i["q"], i["k"], i["table_k"], K, scale),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", [c.name for c in specs()["shaw_attention"].cases])
def test_attention_golden_vs_materialised_t2t(name) -> None:
    case, K, scale = golden_case("shaw_attention", name)
    i = case.inputs
    expected = t2t_attention(i["q"], i["k"], i["v"], i["table_k"], i["table_v"], i["mask"],
                             K, scale)
    np.testing.assert_allclose(case.output, expected, rtol=1e-12, atol=1e-12)
