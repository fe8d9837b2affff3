"""Tolerance policy, and the comparison that reports max abs/rel error and the worst index.

An element passes when ``|actual - expected| <= atol * scale + rtol * |expected| +
angle * eps(compute) * angle_bound * scale``, where ``scale`` follows the output quantity: its
largest magnitude, or how far it moves with its float inputs when larger, never more than the
largest input (conformance/case_scale.py), ``eps(compute)`` is the machine epsilon of the dtype the
angles are computed in (float64 for float64 results, float32 otherwise) and ``angle_bound`` the
largest |angle| a trigonometric case evaluates: a float32 angle ``m * theta`` is only known to
about ``eps32 * |m * theta|``, an error no implementation computing angles in float32 avoids.

Precision profiles (``--precision``) say which of those errors a run admits; each result is also
graded with the tightest profile it meets (:mod:`.grading`).

- ``exact`` (the default): the spec's tolerances as written. The rotary specs set ``angle: 0``:
  their phases come from exact positions, so no slack grows with the position.
- ``conventional``: angles ``m * theta`` computed in float32 the usual way (one rounding of
  theta, one of the product, ``m`` exact below 2^24). The computed angle is off by at most
  ``2 u32 |m theta|`` (``u32 = eps32 / 2``, plus a few ulps of ``pow`` for theta), so cos and
  sin are each off by that much, and the rotation ``x_a cos - x_b sin`` adds the two terms:
  ``|error| <= 2 * 2 u32 * angle_bound * scale = 2 eps32 * angle_bound * scale``. The profile
  restores the angle coefficient of :data:`DEFAULTS` (4, twice that bound) where a spec sets a
  smaller one; float64 results keep float64 angles. Only trigonometric specs differ.
- ``reduced``: the angles, or the cos/sin cache, held in bfloat16 or float16 (unit roundoff
  ``u16 = 2^-8`` for bfloat16, the coarser of the two). Two rounded operands (the position or
  theta, and the product) put the angle ``2 u16 |m theta|`` off, the two terms of the rotation
  double it: the angle term becomes ``4 * u16 * angle_bound * scale`` (the DEFAULTS coefficient
  with ``eps = u16``), and rounding cos and sin themselves adds ``u16 / 2`` per term, two terms:
  ``atol += u16``.

Every tolerance is at least the result dtype's half-ulp plus the rounding of the inputs
(``tests/test_tolerance_floor.py`` holds each spec to it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

EPS = {"float64": float(np.finfo(np.float64).eps), "float32": float(np.finfo(np.float32).eps)}

PROFILES = ("exact", "conventional", "reduced")  # tightest first
REDUCED_ANGLE_EPS = 2.0**-8  # unit roundoff of bfloat16, the coarser 16-bit angle dtype

# Results rounded to bfloat16 (8 significant bits) or float16 (11) carry half an ulp of
# relative error, and one more for the input rounding inside a two-term rotation.
DEFAULTS = {
    "float64": {"rtol": 1e-12, "atol": 1e-12, "angle": 4.0},
    "float32": {"rtol": 4e-6, "atol": 4e-6, "angle": 4.0},
    "bfloat16": {"rtol": 2.0**-7, "atol": 2.0**-7, "angle": 4.0},
    "float16": {"rtol": 2.0**-10, "atol": 2.0**-10, "angle": 4.0},
}


@dataclass(frozen=True)
class Tolerance:
    dtype: str
    rtol: float
    atol: float
    angle: float
    reason: str = "default for the dtype"
    angle_eps: float | None = None  # relative error of a stored angle (None: the compute dtype's)
    profile: str = "exact"

    @property
    def compute_eps(self) -> float:
        if self.angle_eps is not None:
            return self.angle_eps
        return EPS["float64" if self.dtype == "float64" else "float32"]

    def allowed(self, expected: Any, scale: float, angle_bound: float = 0.0) -> Any:
        """Allowed absolute error, elementwise for ``expected``."""
        return (self.atol * scale + self.rtol * np.abs(expected)
                + self.angle * self.compute_eps * angle_bound * scale)

    def loosened(self, factor: float) -> Tolerance:
        return replace(self, rtol=self.rtol * factor, atol=self.atol * factor)


def tolerance_for(dtype: str, overrides: dict[str, dict[str, Any]] | None = None,
                  profile: str = "exact", trigonometric: bool = False) -> Tolerance:
    """The tolerance for results of ``dtype``: the defaults, a spec's ``overrides`` and, for a
    trigonometric spec, the precision ``profile`` (see the module docstring)."""
    if profile not in PROFILES:
        raise ValueError(f"precision profile {profile!r} (known: {', '.join(PROFILES)})")
    values = dict(DEFAULTS[dtype])
    reason = "default for the dtype"
    if overrides and dtype in overrides:
        values.update({k: v for k, v in overrides[dtype].items() if k != "reason"})
        reason = overrides[dtype]["reason"]
    tol = Tolerance(dtype=dtype, reason=reason, **values)
    if profile == "exact" or not trigonometric:
        return tol
    angle = max(tol.angle, DEFAULTS[dtype]["angle"])
    if profile == "conventional":
        if angle == tol.angle:
            return tol
        return replace(tol, angle=angle, profile=profile,
                       reason=f"{reason}; conventional: float32 angles m·θ admitted "
                              f"({angle:g}·eps·|m·θ|)")
    return replace(tol, angle=angle, atol=tol.atol + REDUCED_ANGLE_EPS,
                   angle_eps=REDUCED_ANGLE_EPS, profile=profile,
                   reason=f"{reason}; reduced: angles or cos/sin held in bfloat16/float16 "
                          f"({angle:g}·2^-8·|m·θ| + 2^-8)")


@dataclass
class Comparison:
    ok: bool
    message: str
    max_abs: float = 0.0
    max_rel: float = 0.0
    tolerance: float = 0.0
    worst_index: tuple[int, ...] | None = None

    def details(self) -> dict[str, Any]:
        return {"max_abs": self.max_abs, "max_rel": self.max_rel, "tolerance": self.tolerance,
                "worst_index": list(self.worst_index) if self.worst_index is not None else None}


def compare(actual: np.ndarray, expected: np.ndarray, tol: Tolerance, *, scale: float,
            angle_bound: float = 0.0) -> Comparison:
    """Elementwise comparison in float64, or complex128 when both sides are complex (the error
    is then the modulus of the difference)."""
    if np.iscomplexobj(actual) != np.iscomplexobj(expected):
        kinds = ["complex" if np.iscomplexobj(a) else "real" for a in (actual, expected)]
        return Comparison(False, f"got a {kinds[0]} result, expected a {kinds[1]} one")
    wide = np.complex128 if np.iscomplexobj(expected) else np.float64
    actual = np.asarray(actual, dtype=wide)
    expected = np.asarray(expected, dtype=wide)
    if actual.shape != expected.shape:
        return Comparison(False, f"shape {actual.shape} != expected {expected.shape}")
    if actual.size == 0:
        return Comparison(True, "empty")
    same = (actual == expected) | (np.isnan(actual) & np.isnan(expected))  # equal infinities too
    with np.errstate(invalid="ignore"):
        err = np.where(same, 0.0, np.abs(actual - expected))
    err = np.where(np.isnan(err), np.inf, err)
    with np.errstate(invalid="ignore"):  # an infinite expected value must be met exactly
        allowed = np.where(np.isfinite(expected), tol.allowed(expected, scale, angle_bound), 0.0)
    allowed = np.broadcast_to(allowed, err.shape)
    excess = err - allowed
    worst = tuple(int(i) for i in np.unravel_index(np.argmax(excess), err.shape))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(err == 0, 0.0, err / np.abs(expected))
    rel = np.where(np.isnan(rel), np.inf, rel)
    result = Comparison(
        ok=bool(np.all(excess <= 0)), message="", max_abs=float(err.max()),
        max_rel=float(np.max(rel)), tolerance=float(allowed[worst]), worst_index=worst)
    result.message = (
        f"max abs error {result.max_abs:.3e}, max rel error {result.max_rel:.3e}; worst at index "
        f"{worst}: got {actual[worst]:.9g}, expected {expected[worst]:.9g}, error "
        f"{err[worst]:.3e} > tolerance {result.tolerance:.3e}"
        if not result.ok else f"max abs error {result.max_abs:.3e} within tolerance")
    return result
