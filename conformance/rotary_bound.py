"""The conventional profile's bound for a rotary output, element by element.

A case's single tolerance ``CONVENTIONAL_ANGLE·eps·max|m|·θ0·scale`` holds every element to the
fastest feature at the farthest position, so a cache clamped or zeroed past some row could pass
a long case (issue 44). Here the same error model (:mod:`.tolerances`) is evaluated at each
element's own position ``m``, its own scaled frequency ``θ'_i`` and its rotation pair:

    B = atol·scale + rtol·|e| + 2 (K_i + 1) u32 |m θ'_i| |pair_i| + PAIR_ROUNDING·|pair_i|

with ``K_i = κ_i`` (:func:`.tolerances.frequency_ulps` of the unscaled θ_i and of θ'_i, the
larger), plus ``SCALING_ULPS`` under a scaling schedule, plus the blend's gain where the element
sits inside a blend: Llama 3's smoothing ``(f - 1)(a + s)/(1 + (f - 1)s)·(κ_i + 3)``
(``a = low/(high - low)``), YaRN's ramp ``2 (f - 1) + 2`` (its float32 weight a few u off).
``|pair_i|`` is the modulus of the expected pair ``(e_a, e_b)`` (the rotation keeps it, the
attention factor included); features past the rotary width pass through with no angle term.

*Judged elements.* An element whose angle terms reach ``JUDGEABLE`` (a tenth) of ``|pair_i|``
is not judged: its bound says nothing about the rotation. It is still held to its bound (an
error beyond it fails), but its passing counts for nothing. A case passes only when every
element is within its bound, at least ``MIN_JUDGED`` (half) of its finite elements are judged,
and the model resolves one position at the case's farthest row: an angle ``2 (K_i + 1) u32
|m θ'_i|`` off is a position ``2 (K_i + 1) u32 |m|`` off, whatever the frequency, so where even
the best-resolved feature admits a whole position (``|m|`` near 2^20) an off-by-one is within
the model everywhere. Otherwise, errors within, the case is *not judgeable*.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from posenc import catalog
from posenc.specs import Spec, resolve_params

from .tolerances import JUDGEABLE, SCALING_ULPS, U32, Tolerance, frequency_ulps

ROTARY_SPECS = frozenset({"rope"})  # specs whose outputs are x rotated by one schedule
MIN_JUDGED = 0.5  # the fraction of a case's elements that must be judged for it to pass
PAIR_ROUNDING = 4e-6  # cos/sin and the two-term rotation rounded in float32, relative to |pair|
YARN_RAMP_ULPS = 2.0  # YaRN's float32 ramp weight: its division and 1 - ramp


@dataclass(frozen=True)
class ElementBound:
    """What the conventional profile admits beyond the spec's own tolerance, per element."""

    angle: np.ndarray  # the admitted error of the float32 angle and rotation (absolute)
    resolution: float  # the smallest position error the model admits at the farthest row
    magnitude: np.ndarray  # |pair_i|: the modulus of the element's rotation pair (expected)
    position: np.ndarray  # the element's position m
    frequency: np.ndarray  # its scaled frequency θ'_i (0 past the rotary width)

    @property
    def judged(self) -> np.ndarray:
        return self.angle < JUDGEABLE * self.magnitude


def _schedule(spec_params: dict[str, Any], dim: int, seq: int, positions: np.ndarray | None
              ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """The scaled and the unscaled frequencies of a rope call, as its reference takes them."""
    scaling = spec_params.get("scaling") or None
    seq_len = spec_params.get("seq_len")
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if seq_len is None and kind in ("dynamic", "longrope"):
        seq_len = seq if positions is None else int(np.max(positions)) + 1
    table = catalog.reference_function(catalog.specs()["rope_frequencies"])
    width = spec_params.get("rotary_dim") or dim
    scaled, _ = table(dim=width, base=spec_params["base"], scaling=scaling, seq_len=seq_len)
    base = float((scaling or {}).get("rope_theta") or spec_params["base"])
    r = 2 * len(scaled)
    plain = base ** (-2.0 * np.arange(r // 2) / r)
    return np.asarray(scaled, np.float64), plain, dict(scaling or {}, kind=kind)


def _blend_gain(scaled: np.ndarray, plain: np.ndarray, kappa: np.ndarray,
                scaling: dict[str, Any]) -> np.ndarray:
    """How much a blend of θ/f and θ magnifies the float32 errors of its inputs, in u32."""
    kind, gain = scaling["kind"], np.zeros_like(plain)
    if kind == "llama3" and scaling["high_freq_factor"] != scaling["low_freq_factor"]:
        f, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        smooth = (scaling["original_max_position_embeddings"] * plain / (2 * np.pi) - low) / (
            high - low)
        band = (smooth >= 0) & (smooth <= 1)
        s = np.clip(smooth, 0.0, 1.0)
        gain = np.where(band, (f - 1) * (low / (high - low) + s) / (1 + (f - 1) * s)
                        * (kappa + 3), 0.0)
    elif kind == "yarn":  # the ramp's pairs: strictly between θ/f and θ
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(plain > 0, scaled / plain, 1.0)
        f = 1.0 / float(np.min(ratio, initial=1.0))
        ramp = (ratio > (1 + 1e-9) / f) & (ratio < 1 - 1e-9)
        gain = np.where(ramp, YARN_RAMP_ULPS * (f - 1) + YARN_RAMP_ULPS, 0.0)
    return gain


def _per_pair_ulps(scaled: np.ndarray, plain: np.ndarray, scaling: dict[str, Any]) -> np.ndarray:
    """K_i: the bound of the relative error of each float32 θ'_i, in units of u32."""
    index = np.arange(len(plain))
    with np.errstate(divide="ignore"):
        kappa = np.maximum(frequency_ulps(plain, index),
                           frequency_ulps(np.where(scaled > 0, scaled, 1.0), index))
    if scaling["kind"] == "default":
        return kappa
    return kappa + SCALING_ULPS + _blend_gain(scaled, plain, kappa, scaling)


def _pairs(layout: str, r: int) -> tuple[np.ndarray, np.ndarray]:
    """The pair index and the partner feature of each of the r rotated features."""
    feature = np.arange(r)
    if layout == "interleaved":
        return feature // 2, feature ^ 1
    half = r // 2
    return feature % half, np.where(feature < half, feature + half, feature - half)


def _positions(x_shape: tuple[int, ...], positions: Any) -> np.ndarray:
    """One position per row of x, shaped to broadcast against x[..., seq, 1]."""
    seq = x_shape[-2]
    pos = np.arange(seq) if positions is None else np.asarray(positions)
    if pos.ndim == 2:  # [batch, seq] against x [batch, ..., seq, dim]
        pos = pos.reshape(pos.shape[0], *([1] * (len(x_shape) - 3)), seq)
    return pos.astype(np.float64)[..., None]


def for_call(spec: Spec, params: dict[str, Any], inputs: dict[str, Any], expected: np.ndarray,
             tol: Tolerance) -> ElementBound | None:
    """The per-element bound of a rotary call's output ``expected`` (the truth) under ``tol``,
    or None where the case-wide tolerance applies: another spec or profile, float64 results,
    an output not shaped like x, or a call the schedule cannot be evaluated for."""
    if spec.id not in ROTARY_SPECS or tol.profile != "conventional" or tol.dtype == "float64":
        return None
    x = inputs.get("x")
    expected = np.asarray(expected)
    if x is None or np.iscomplexobj(expected) or expected.shape != np.shape(x):
        return None
    try:
        resolved = resolve_params(spec, params)
        positions = inputs.get("positions")
        scaled, plain, scaling = _schedule(resolved, expected.shape[-1], expected.shape[-2],
                                           positions)
        m = _positions(expected.shape, positions)
    except Exception:  # a call outside what the schedule evaluates: the case-wide tolerance
        return None
    r, dim = 2 * len(scaled), expected.shape[-1]
    index, partner = _pairs(resolved["layout"], r)
    ulps = np.zeros(dim)
    frequency = np.zeros(dim)
    ulps[:r] = _per_pair_ulps(scaled, plain, scaling)[index]
    frequency[:r] = scaled[index]
    magnitude = np.abs(expected).astype(np.float64)
    finite = np.where(np.isfinite(expected), expected, 0.0)
    magnitude[..., :r] = np.hypot(finite[..., :r], finite[..., partner])
    rotated = np.arange(dim) < r
    angle = np.where(rotated, 2 * (ulps + 1) * U32 * np.abs(m * frequency) * magnitude
                     + PAIR_ROUNDING * magnitude, 0.0)
    # an error of the angle m·θ'_i by 2 (K_i + 1) u32 |m θ'_i| is one of the position by
    # 2 (K_i + 1) u32 |m|, whatever the frequency: the best any feature resolves at max |m|
    far = float(np.max(np.abs(m), initial=0.0))
    resolution = 2 * (float(np.min(ulps[:r])) + 1) * U32 * far if r else 0.0
    return ElementBound(angle=angle, resolution=resolution, magnitude=magnitude,
                        position=np.broadcast_to(m, expected.shape),
                        frequency=np.broadcast_to(frequency, expected.shape))


def for_case(spec: Spec, case: Any, tol: Tolerance) -> ElementBound | None:
    """:func:`for_call` on a golden case."""
    return for_call(spec, case.params, case.inputs, case.output, tol)


def for_outputs(spec: Spec, params: dict[str, Any], inputs: dict[str, Any],
                expected: np.ndarray, tol: Tolerance, sides: int = 2) -> ElementBound | None:
    """:func:`for_call` for a property that compares two float32 results of the implementation
    (``expected`` one of them): each of the ``sides`` rotations admits the model's error, so
    their angle terms add up."""
    bound = for_call(spec, params, inputs, expected, tol)
    if bound is None:
        return None
    return replace(bound, angle=bound.angle * sides, resolution=bound.resolution * sides)
