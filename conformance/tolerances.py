"""Tolerance policy, and the comparison that reports max abs/rel error and the worst index.

An element passes when ``|actual - expected| <= atol * scale + rtol * |expected| + log_rtol *
|expected| * |ln |expected|| + angle * eps(compute) * angle_bound * scale``, where ``scale``
follows the output quantity: its largest magnitude, or how far it moves with its float inputs
when larger, never more than the largest input (conformance/case_scale.py), ``eps(compute)`` is
the machine epsilon of the dtype the angles are computed in (float64 for float64 results,
float32 otherwise) and ``angle_bound`` the largest |angle| a trigonometric case evaluates.

Precision profiles (``--precision``) are error models: each states the arithmetic it admits and
its tolerance is the bound of that arithmetic's error (``u = eps / 2`` is a dtype's unit
roundoff; ``u32 = 2^-24``). Each result is also graded with the tightest profile it meets
(:mod:`.grading`).

- ``exact`` (the default): a float32 (or bfloat16/float16) rotation of exact phases: the spec's
  tolerances as written. The rotary specs set ``angle: 0``: their phases come from exact
  positions, so no slack grows with the position.
- ``conventional``: the angle ``m·θ̂_i`` rounded in float32, with ``θ̂_i`` itself computed in
  float32 the ways engines do: ``base^(-2i/d)`` by ``pow``, by ``exp(-(2i/d)·ln base)``, by a
  ladder ``θ_i = θ_{i-1}·r`` (ggml), and products or blends with scaling factors (linear, NTK,
  Llama 3's smoothing, YaRN's ramp, LongRoPE's per-frequency factors). Bound of the relative
  error of ``θ̂_i``, in units of u32 (:func:`frequency_ulps`):
  ``κ_i = max(POW_ULPS + |ln θ_i|, EXP_ULPS + LOG_ULPS·|ln θ_i|, LADDER_ULPS·i)`` (the exponent
  ``2i/d``, ``ln base`` and their product each round once; ``pow`` is within an ulp, ``exp``
  within 4 ulps; each rung of the ladder adds its ratio's error and the product's rounding).
  The angle is then off by ``|m|·|Δθ_i| + u32·|m θ_i| <= (κ_i + 1)·u32·|m θ_i|``, and the
  rotation ``x_a cos φ - x_b sin φ`` adds two such terms: ``|Δy| <= 2 (κ_i + 1) u32 |m θ_i|
  scale``. A golden case knows only ``angle_bound = max |m θ|`` (θ_0 = 1 at i = 0, exact), so the
  bound is weighted by ``θ_i / θ_0``: ``max_i θ_i |ln θ_i| <= 1/e`` and, for the ladder,
  ``max_i i·θ_i = max_i i·base^(-2i/d) <= d / (2e ln base) <= D_OVER_LN_BASE / (2e)``. With
  ``SCALING_ULPS`` for the scaling factors (their blends sit where ``θ_i <= 2π·high/L0``, a
  weight below 0.02) the angle coefficient is ``CONVENTIONAL_ANGLE = 1 + SCALING_ULPS +
  max(POW_ULPS + 1/e, EXP_ULPS + LOG_ULPS/e, LADDER_ULPS·D_OVER_LN_BASE/(2e))`` (about 25; the
  term is ``CONVENTIONAL_ANGLE·eps32·angle_bound·scale = 2·(K + 1)·u32·...``). Float64 results
  keep float64 angles. Frequency tables (``rope_frequencies``, ``vllm_rope_frequencies``,
  :data:`FREQUENCY_TABLES`) are the ``θ̂_i`` themselves, unweighted. Llama 3's smoothing
  ``θ' = (θ/f)(1 + (f - 1) s)``, ``s = (L0/λ - low)/(high - low)``, ``λ = 2π/θ``: ``L0/λ``
  carries ``(κ + 3) u`` relative (2π, the division, L0), so ``|Δs| <= (low/(high - low) + s)
  (κ + 3) u`` and ``|Δθ'|/θ' <= (f - 1)(a + s)/(1 + (f - 1) s)·(κ + 3) u <= (f - 1) a (κ + 3) u``
  with ``a = low/(high - low)`` (1/3 in every Llama 3 config); YaRN's ramp weight is off by at
  most ``u``, which ``θ/f`` and ``θ`` turn into ``(f - 1) u``, less. With ``BLEND_GAIN = 1 +
  (MAX_FACTOR - 1)·LOW_OVER_BAND`` (14 for DeepSeek-V3's 40x) a table's conventional tolerance
  is ``rtol = BLEND_GAIN·(EXP_ULPS + 3)·u32`` and ``log_rtol = BLEND_GAIN·LOG_ULPS·u32``.
- ``reduced``: the angles, or the cos/sin cache, held in bfloat16 or float16 (unit roundoff
  ``u16 = 2^-8`` for bfloat16, the coarser of the two). Two rounded operands (the position or
  theta, and the product) put the angle ``2 u16 |m theta|`` off, the two terms of the rotation
  double it: the angle term becomes ``4 * u16 * angle_bound * scale`` (the DEFAULTS coefficient
  with ``eps = u16``), and rounding cos and sin themselves adds ``u16 / 2`` per term, two terms:
  ``atol += u16``.

A looser profile (conventional, reduced) judges only what its tolerance can tell apart (the
exact profile is the spec's own stated tolerance): where the allowed error reaches
``JUDGEABLE`` (a tenth) of the data's magnitude (the largest |expected| of the case), the
comparison says so (:attr:`Comparison.unjudged`) and the check is *not judgeable* under that
profile (its own status, ``unjudgeable``), never a pass.

Rotary outputs under ``conventional`` (``rope`` in float32, bfloat16, float16) are held
element by element instead (:mod:`.rotary_bound`, docs/precision.md): the angle term above is
evaluated at each element's own position m, scaled frequency θ'_i and pair magnitude |pair_i|,
``2 (K_i + 1) u32 |m θ'_i| |pair_i| + 4e-6 |pair_i|``, with ``K_i`` the ``κ_i`` of that
frequency, ``SCALING_ULPS`` under a schedule and the blend's own gain inside Llama 3's band or
YaRN's ramp. An element is judged where that term stays below ``JUDGEABLE`` of |pair_i|; every
element is held to its bound, and the case is judgeable when at least ``MIN_JUDGED`` (half) of
its elements are judged and the model resolves one position at its farthest row
(``2 (min K_i + 1) u32 max|m| < 1``). Rope's properties that compare two of the
implementation's results use the same bound, its angle terms once per side.
:attr:`Comparison.elements` records what was judged and the worst error as a fraction of its
own bound, with its position and feature.

Every tolerance is at least the result dtype's half-ulp plus the rounding of the inputs
(``tests/harness/test_tolerance_floor.py`` holds each spec to it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

EPS = {"float64": float(np.finfo(np.float64).eps), "float32": float(np.finfo(np.float32).eps)}

PROFILES = ("exact", "conventional", "reduced")  # tightest first
REDUCED_ANGLE_EPS = 2.0**-8  # unit roundoff of bfloat16, the coarser 16-bit angle dtype
U32 = 2.0**-24  # unit roundoff of float32

# The conventional profile's model of float32 frequency arithmetic (module docstring): bounds of
# the relative error of a float32 theta_i, in units of U32.
POW_ULPS = 2.0  # powf within an ulp (2 u) of the exact power of its rounded arguments
EXP_ULPS = 8.0  # expf within 4 ulps (MLX's float32 exp was measured 3.5 eps off)
LOG_ULPS = 3.0  # times |ln theta_i|: the exponent 2i/d, ln(base) and their product round once each
LADDER_ULPS = 3.0  # per rung of theta_i = theta_(i-1) * r: r = powf(base, -2/d) (2 u) and the product
D_OVER_LN_BASE = 40.0  # the largest d / ln(base) admitted: head 512 at base 1e6 (37), 256 at 1e4 (28)
SCALING_ULPS = 2.0  # scaling factors' products and blends, weighted by theta_i / theta_0 (< 0.02)
MAX_FACTOR = 40.0  # the largest scaling factor a blend divides by (DeepSeek-V3's YaRN)
LOW_OVER_BAND = 1.0 / 3.0  # Llama 3's low_freq_factor / (high - low): 1 / (4 - 1)
# how much a blend theta' = (theta / f)(1 + (f - 1) s) magnifies its inputs' relative error
BLEND_GAIN = 1.0 + (MAX_FACTOR - 1.0) * LOW_OVER_BAND
CONVENTIONAL_ANGLE = 1.0 + SCALING_ULPS + max(
    POW_ULPS + 1 / np.e, EXP_ULPS + LOG_ULPS / np.e, LADDER_ULPS * D_OVER_LN_BASE / (2 * np.e))
FREQUENCY_TABLES = frozenset({"rope_frequencies", "vllm_rope_frequencies"})
JUDGEABLE = 0.1  # a tolerance reaching this fraction of the data's magnitude judges nothing
MIN_JUDGED = 0.5  # per-element bounds: the fraction of a case's elements that must be judged


def frequency_ulps(theta: Any, index: Any) -> np.ndarray:
    """kappa_i: the bound, in units of U32, of the relative error of ``theta`` (= theta_i, the
    ``index``-th frequency of an unscaled schedule) computed in float32 by ``pow``, by
    ``exp(log)`` or by a ladder of ``index`` float32 products."""
    ln = np.abs(np.log(np.asarray(theta, dtype=np.float64)))
    return np.maximum.reduce([POW_ULPS + ln, EXP_ULPS + LOG_ULPS * ln,
                              LADDER_ULPS * np.asarray(index, dtype=np.float64)])


def float32_phase_error(angle: Any, theta: Any, index: Any) -> np.ndarray:
    """The conventional profile's bound of the error of a float32 angle ``m * theta_i`` (so of
    its cos and sin, before their own rounding): ``(kappa_i + 1) * U32 * |m theta_i|``."""
    return (frequency_ulps(theta, index) + 1.0) * U32 * np.abs(angle)

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
    log_rtol: float = 0.0  # times |expected| * |ln |expected||: float32 frequencies (conventional)

    @property
    def compute_eps(self) -> float:
        if self.angle_eps is not None:
            return self.angle_eps
        return EPS["float64" if self.dtype == "float64" else "float32"]

    def allowed(self, expected: Any, scale: float, angle_bound: float = 0.0) -> Any:
        """Allowed absolute error, elementwise for ``expected``."""
        magnitude = np.abs(expected)
        allowed = (self.atol * scale + self.rtol * magnitude
                   + self.angle * self.compute_eps * angle_bound * scale)
        if self.log_rtol:
            with np.errstate(divide="ignore", invalid="ignore"):
                log = np.where(magnitude > 0, np.abs(np.log(np.where(magnitude > 0, magnitude,
                                                                     1.0))), 0.0)
            allowed = allowed + self.log_rtol * magnitude * log
        return allowed

    def loosened(self, factor: float) -> Tolerance:
        return replace(self, rtol=self.rtol * factor, atol=self.atol * factor)


def for_spec(spec: Any, dtype: str, profile: str = "exact") -> Tolerance:
    """The tolerance of ``spec``'s results in ``dtype`` under ``profile``."""
    return tolerance_for(dtype, spec.tolerances, profile, spec.trigonometric,
                         frequencies=spec.id in FREQUENCY_TABLES)


def tolerance_for(dtype: str, overrides: dict[str, dict[str, Any]] | None = None,
                  profile: str = "exact", trigonometric: bool = False, *,
                  frequencies: bool = False) -> Tolerance:
    """The tolerance for results of ``dtype``: the defaults, a spec's ``overrides`` and, for a
    trigonometric spec or a table of frequencies, the precision ``profile`` (see the module
    docstring)."""
    if profile not in PROFILES:
        raise ValueError(f"precision profile {profile!r} (known: {', '.join(PROFILES)})")
    values = dict(DEFAULTS[dtype])
    reason = "default for the dtype"
    if overrides and dtype in overrides:
        values.update({k: v for k, v in overrides[dtype].items() if k != "reason"})
        reason = overrides[dtype]["reason"]
    tol = Tolerance(dtype=dtype, reason=reason, **values)
    if profile == "exact" or not (trigonometric or frequencies):
        return tol
    if frequencies:  # the table is the frequencies themselves: no angle
        if dtype == "float64":
            return tol
        rtol = max(tol.rtol, BLEND_GAIN * (EXP_ULPS + 3) * U32)
        why = (f"{reason}; conventional: frequencies computed in float32 (pow, exp(log), scaling "
               f"factors and blends) admitted: {BLEND_GAIN:.3g}·({EXP_ULPS:g} + 3 + "
               f"{LOG_ULPS:g}·|ln θ|)·2^-24 relative (a blend's gain 1 + (f - 1)/3, f <= "
               f"{MAX_FACTOR:g})")
        if profile == "reduced":
            rtol += REDUCED_ANGLE_EPS
            why += "; reduced: the table held in bfloat16/float16 (+2^-8 relative)"
        return replace(tol, rtol=rtol, log_rtol=BLEND_GAIN * LOG_ULPS * U32, profile=profile,
                       reason=why)
    if profile == "conventional":
        angle = max(tol.angle, DEFAULTS[dtype]["angle"] if dtype == "float64"
                    else CONVENTIONAL_ANGLE)
        if angle == tol.angle:
            return tol
        return replace(tol, angle=angle, profile=profile,
                       reason=f"{reason}; conventional: float32 angles m·θ of float32 "
                              f"frequencies (pow, exp(log), a ladder of products, scaling "
                              f"factors) admitted ({angle:.3g}·eps·|m·θ|: 2·(κ+1)·2^-24 with "
                              f"κ <= {angle - 1:.3g} ulps of θ)")
    angle = max(tol.angle, DEFAULTS[dtype]["angle"])
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
    unjudged: int = 0  # elements whose allowed error reaches JUDGEABLE of the data's magnitude
    magnitude: float = 0.0  # the data's magnitude: the largest finite |expected|
    widest: float = 0.0  # the largest allowed error
    elements: dict[str, Any] | None = None  # per-element bounds: what was judged (element_record)

    @property
    def judgeable(self) -> bool:
        if self.elements is not None:
            return (self.elements["judged"] >= self.elements["needed"]
                    and self.elements["resolution"] < 1.0)
        return self.unjudged == 0

    def details(self) -> dict[str, Any]:
        out = {"max_abs": self.max_abs, "max_rel": self.max_rel, "tolerance": self.tolerance,
               "worst_index": list(self.worst_index) if self.worst_index is not None else None}
        if self.elements is not None:
            out["elements"] = dict(self.elements)
        if not self.judgeable:
            out["not_judgeable"] = self.not_judgeable()
        return out

    def not_judgeable(self) -> dict[str, Any]:
        """The record of why a comparison judges nothing (JSON: ``details.not_judgeable``)."""
        out = {"elements": self.unjudged, "tolerance": self.widest,
               "magnitude": self.magnitude, "fraction": JUDGEABLE, "errors_within": self.ok}
        if self.elements is not None:
            out.update(judged=self.elements["judged"], needed=self.elements["needed"],
                       resolution=self.elements["resolution"])
        return out

    def unjudged_note(self) -> str:
        if self.elements is not None:
            e = self.elements
            if e["resolution"] >= 1.0:
                return (f"the admitted float32 angles leave the farthest position uncertain by "
                        f"{e['resolution']:.3g} positions (a case is judged where the model "
                        f"resolves one position)")
            return (f"only {e['judged']} of {e['total']} elements judged, {e['needed']} needed "
                    f"(an element is judged where its own bound stays below {JUDGEABLE:g} of "
                    f"its rotation pair's magnitude; a case needs {MIN_JUDGED:.0%} of them)")
        return (f"the tolerance reaches {self.widest:.3g} on {self.unjudged} element(s), "
                f"{self.widest / self.magnitude if self.magnitude else np.inf:.3g}x the data's "
                f"magnitude {self.magnitude:.3g} (a profile judges only where its tolerance "
                f"stays below {JUDGEABLE:g} of it)")


def compare(actual: np.ndarray, expected: np.ndarray, tol: Tolerance, *, scale: float,
            angle_bound: float = 0.0, bound: Any = None) -> Comparison:
    """Elementwise comparison in float64, or complex128 when both sides are complex (the error
    is then the modulus of the difference). ``bound`` (a :class:`.rotary_bound.ElementBound`)
    replaces the case-wide angle term with each element's own, and judges element by element."""
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
    if bound is not None and np.shape(bound.angle) != expected.shape:
        bound = None
    same = (actual == expected) | (np.isnan(actual) & np.isnan(expected))  # equal infinities too
    with np.errstate(invalid="ignore"):
        err = np.where(same, 0.0, np.abs(actual - expected))
    err = np.where(np.isnan(err), np.inf, err)
    finite = np.isfinite(expected)
    with np.errstate(invalid="ignore"):  # an infinite expected value must be met exactly
        own = (tol.allowed(expected, scale) + bound.angle if bound is not None
               else tol.allowed(expected, scale, angle_bound))
        allowed = np.where(finite, own, 0.0)
    allowed = np.broadcast_to(allowed, err.shape)
    magnitude = float(np.max(np.abs(expected[finite]), initial=0.0)) or scale
    # only a looser profile's admitted arithmetic can outgrow the data; the exact profile is the
    # spec's own stated tolerance (tests/harness/test_tolerance_floor.py holds each spec to it)
    if bound is not None:
        unjudged = finite & ~bound.judged
    elif tol.profile != "exact":
        unjudged = finite & (allowed >= JUDGEABLE * magnitude)
    else:
        unjudged = np.zeros(err.shape, bool)
    excess = err - allowed
    worst = tuple(int(i) for i in np.unravel_index(np.argmax(excess), err.shape))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(err == 0, 0.0, err / np.abs(expected))
    rel = np.where(np.isnan(rel), np.inf, rel)
    result = Comparison(
        ok=bool(np.all(excess <= 0)), message="", max_abs=float(err.max()),
        max_rel=float(np.max(rel)), tolerance=float(allowed[worst]), worst_index=worst,
        unjudged=int(np.count_nonzero(unjudged)), magnitude=magnitude,
        widest=float(np.max(allowed, where=finite, initial=0.0)))
    if bound is not None:
        result.elements = element_record(err, allowed, finite & ~unjudged, finite, bound)
    result.message = (
        f"max abs error {result.max_abs:.3e}, max rel error {result.max_rel:.3e}; worst at index "
        f"{worst}{_where(bound, worst)}: got {actual[worst]:.9g}, expected "
        f"{expected[worst]:.9g}, error {err[worst]:.3e} > tolerance {result.tolerance:.3e}"
        if not result.ok else f"max abs error {result.max_abs:.3e} within tolerance"
        f"{element_summary(result.elements)}")
    return result


def _where(bound: Any, index: tuple[int, ...]) -> str:
    if bound is None:
        return ""
    return (f" (position {bound.position[index]:.0f}, feature {index[-1]}; its own bound, "
            f"θ' = {bound.frequency[index]:.3g})")


def element_record(err: np.ndarray, allowed: np.ndarray, judged: np.ndarray,
                   finite: np.ndarray, bound: Any) -> dict[str, Any]:
    """What a per-element comparison judged: how many elements, how many were needed, and the
    worst judged error as a fraction of its own bound, with its position and feature."""
    total = int(np.count_nonzero(finite))
    out: dict[str, Any] = {"judged": int(np.count_nonzero(judged)), "total": total,
                           "needed": max(1, int(np.ceil(MIN_JUDGED * total))),
                           "resolution": float(bound.resolution)}
    if out["judged"]:
        with np.errstate(divide="ignore", invalid="ignore"):
            fraction = np.where(judged, np.where(err == 0, 0.0, err / allowed), -1.0)
        index = tuple(int(i) for i in np.unravel_index(np.argmax(fraction), err.shape))
        out.update(worst_fraction=float(fraction[index]), worst_index=list(index),
                   worst_position=float(bound.position[index]), worst_feature=index[-1])
    return out


def element_summary(elements: dict[str, Any] | None) -> str:
    """The report's line on a per-element comparison ("" without one)."""
    if elements is None:
        return ""
    text = f"; judged {elements['judged']} of {elements['total']} elements on their own bounds"
    if "worst_fraction" in elements:
        text += (f", the worst at {elements['worst_fraction']:.3g} of its bound (position "
                 f"{elements['worst_position']:.0f}, feature {elements['worst_feature']})")
    return text
