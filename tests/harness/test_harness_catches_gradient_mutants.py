"""The gradient check (autodiff vs finite differences of the reference) catches backends whose
values are right but whose gradients are not; the golden cases cannot."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from posenc.conformance import Options, run

from ..mutants import gradients


def outcomes(backend, encoding: str) -> dict[str, str]:
    options = Options(backends=[backend], dtypes=["float64"], modes=["eager"],
                      encodings=[encoding], properties=False)
    return {f"{r.check.kind}:{r.check.name}": r.status for r in run(options)}


@pytest.mark.parametrize(("backend", "encoding"), [
    (gradients.DETACHED_ROPE, "rope"),
    (gradients.FLIPPED_BACKWARD, "learned"),
])
def test_wrong_gradients_fail_only_the_gradient_check(backend, encoding: str) -> None:
    found = outcomes(backend, encoding)
    assert found.pop("gradient:autodiff") == "fail"
    assert found and set(found.values()) == {"pass"}, found


def test_the_unbroken_backend_passes_the_gradient_check() -> None:
    assert outcomes("torch", "learned")["gradient:autodiff"] == "pass"


def test_a_broken_rotary_table_fails_through_the_layer_backend(monkeypatch) -> None:
    """The torch-layers backend checks RotaryEmbedding's table path: rows read one position
    late fail the goldens (and pass again once repaired)."""
    from posenc.backends.torch import layers as torch_layers

    original = torch_layers.RotaryEmbedding._cos_sin
    monkeypatch.setattr(torch_layers.RotaryEmbedding, "_cos_sin",
                        lambda self, x, positions: original(self, x, positions + 1))
    options = Options(backends=["torch-layers"], dtypes=["float32"], modes=["eager"],
                      encodings=["rope"], properties=False)
    failed = {r.check.name for r in run(options) if r.failed}
    assert {"half_default_positions", "decode_one_token"} <= failed, failed
