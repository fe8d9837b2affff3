"""Gradient checks: a backend's autodiff against central finite differences of the reference.

For one golden case (float64, eager), each floating input ``x_n`` gets a random direction
``v_n`` and the output a random cotangent ``u`` (zero where the output is not finite, e.g.
masked scores). The backend's vector-Jacobian product gives ``<J_n^T u, v_n>``; the float64
NumPy reference gives ``<u, (f(x_n + e v_n) - f(x_n - e v_n)) / 2e>``. Both are the same
directional derivative, so a wrong backward (or a forward that autodiff cannot see through)
fails, while the reference, not the implementation, decides what the derivative should be.
"""

from __future__ import annotations

import numpy as np

from posenc import catalog
from posenc.golden import GoldenCase, output_array
from posenc.specs import Spec, resolve_params

from .context import CheckFailure, Context, Unsupported

STEP = 1e-5  # central differences: truncation ~STEP^2, rounding ~1e-16 / STEP
RTOL, ATOL = 1e-6, 1e-9


def differentiable(spec: Spec) -> bool:
    """A spec whose output is real-valued and depends on floating inputs."""
    return spec.output_kind == "float" and any(d.kind == "float" for d in spec.inputs)


def pick_case(spec: Spec, cases: dict[str, GoldenCase]) -> GoldenCase | None:
    """The first golden case with a floating input and a real output."""
    floats = [d.name for d in spec.inputs if d.kind == "float"]
    for case in cases.values():
        if not np.iscomplexobj(case.output) and any(case.inputs.get(n) is not None
                                                     for n in floats):
            return case
    return None


def check_gradient(ctx: Context, case: GoldenCase) -> None:
    backend = ctx.backend
    if backend.vjp is None:
        raise Unsupported(f"backend {backend.name!r} does not differentiate")
    spec = ctx.spec
    present = tuple(k for k, v in case.inputs.items() if v is not None)
    floats = [n for n in present if next(d for d in spec.inputs if d.name == n).kind == "float"]
    rng = np.random.default_rng(20261121)
    cotangent = rng.standard_normal(case.output.shape) * np.isfinite(case.output)
    arrays = [ctx._convert(n, case.inputs[n]) for n in present]
    call = ctx._callable(present, dict(case.params))
    wrt = [present.index(n) for n in floats]
    grads = backend.vjp(call, arrays, wrt,
                        backend.from_numpy(cotangent, "float64", ctx.device))
    reference = catalog.reference_function(spec)
    params = resolve_params(spec, case.params)

    def evaluate(name: str, shift: np.ndarray) -> np.ndarray:
        values = {k: v for k, v in case.inputs.items()}
        values[name] = values[name] + shift
        return output_array(reference(*values.values(), **params))

    for name, grad in zip(floats, grads, strict=True):
        direction = rng.standard_normal(case.inputs[name].shape)
        g = backend.to_numpy(grad)
        if g.shape != direction.shape:
            raise CheckFailure(f"gradient of {name}: shape {g.shape}, expected {direction.shape}")
        autodiff = float(np.sum(g * direction))
        plus, minus = evaluate(name, STEP * direction), evaluate(name, -STEP * direction)
        with np.errstate(invalid="ignore"):  # -inf - -inf where the output is masked
            difference = np.where(cotangent != 0, (plus - minus) / (2 * STEP), 0.0)
        finite = float(np.sum(cotangent * difference))
        scale = max(abs(finite), float(np.sum(np.abs(g * direction))))
        if not abs(autodiff - finite) <= RTOL * scale + ATOL:
            raise CheckFailure(
                f"case {case.name!r}: d/d{name} along a random direction: autodiff "
                f"{autodiff:.10g}, finite differences of the reference {finite:.10g} "
                f"(|diff| {abs(autodiff - finite):.3g} > {RTOL:g}·{scale:.3g} + {ATOL:g})",
                {"input": name, "autodiff": autodiff, "finite_difference": finite})

