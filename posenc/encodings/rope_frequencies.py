"""RoPE frequency schedules: the ``rope_scaling`` / ``rope_parameters`` dicts of transformers.

Everything here is host-side float64 arithmetic on static parameters, in plain Python floats
(torch.compile folds them into constants; NumPy here would be traced into the graph, where
Inductor's float64 pow is not exact); the rotary encodings turn the frequencies into exact
phases (``rotary.phases``). Semantics follow
``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS`` of transformers 5.x (checked against
5.23), plus ``ntk`` (static NTK-aware scaling), which transformers does not have.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np  # only to accept NumPy scalars in dicts

from .. import array_api, params
from ..errors import ParameterError
from ..host_cache import host_cache

__all__ = ["rope_frequencies"]

SCHEDULES = ("default", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope", "proportional",
             "ntk_alpha")
# legacy names a config may carry: Qwen2-VL's {"type": "mrope"} has default frequencies;
# HunyuanOCR's {"type": "xdrope", "alpha": ...} is dynamic (HunYuanVLTextConfig renames it),
# so ntk_alpha with its alpha
_ALIASES = {"mrope": "default", "xdrope": "dynamic"}
# keys that any dict may carry: they describe the model, not the schedule
_COMMON = frozenset({"rope_type", "type", "rope_theta", "partial_rotary_factor",
                     "max_position_embeddings", "original_max_position_embeddings",
                     "mrope_section", "mrope_interleaved", "xdrope_section", "model_type"})
_REQUIRED = {
    "default": set(), "proportional": set(),
    "linear": {"factor"}, "ntk": {"factor"}, "dynamic": {"factor"},
    "yarn": {"factor", "original_max_position_embeddings"},
    "llama3": {"factor", "original_max_position_embeddings", "low_freq_factor",
               "high_freq_factor"},
    "longrope": {"short_factor", "long_factor", "original_max_position_embeddings"},
    "ntk_alpha": {"alpha"},
}
_OPTIONAL = {
    "proportional": {"factor"},
    "yarn": {"attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
             "truncate"},
    "longrope": {"factor", "attention_factor"},
    # Hunyuan's published dicts carry these beside alpha; transformers ignores them, as here
    "ntk_alpha": {"factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim"},
}


@dataclass(frozen=True)
class Schedule:
    """Frequencies of one rotary layer, resolved from a scaling dict.

    ``rotary_dim``: features rotated (``int(dim * partial_rotary_factor)``; all of ``dim`` for
    ``proportional``, whose unrotated pairs get frequency 0). ``inv_freq``: float64
    ``[rotary_dim/2]`` (a tuple of floats). ``attention_factor`` multiplies cos and sin. For
    ``longrope`` without a
    static ``seq_len``, ``long_inv_freq`` and ``switch_length`` let the caller pick the long
    factors at run time when ``max(positions) + 1 > switch_length``."""

    rotary_dim: int
    inv_freq: tuple[float, ...]
    attention_factor: float
    long_inv_freq: tuple[float, ...] | None = None
    switch_length: int | None = None


def schedule_type(scaling: Mapping[str, Any] | None) -> str:
    """The schedule a scaling dict names (``rope_type``, or the legacy ``type``)."""
    if scaling is None:
        return "default"
    if not isinstance(scaling, Mapping):
        raise ParameterError(f"scaling must be a dict (a transformers rope_scaling / "
                             f"rope_parameters), got {scaling!r} ({type(scaling).__name__})")
    for key in ("rope_type", "type"):
        if key in scaling and not isinstance(scaling[key], str):
            raise ParameterError(f"scaling[{key!r}] must be a string, got {scaling[key]!r}")
    names = {scaling[k] for k in ("rope_type", "type") if k in scaling}
    if len(names) > 1:
        raise ParameterError(f"scaling has rope_type={scaling['rope_type']!r} and "
                             f"type={scaling['type']!r}: give one")
    name = names.pop() if names else "default"
    name = _ALIASES.get(name, name)
    if name == "dynamic" and scaling.get("alpha"):
        # Hunyuan's checkpoints label a fixed NTK-alpha "dynamic"; transformers' HunYuan rotary
        # module reads dynamic with a truthy alpha as ntk_alpha, and so does posenc
        name = "ntk_alpha"
    if name not in SCHEDULES:
        raise ParameterError(f"scaling['rope_type']={name!r} is not one of "
                             f"{', '.join(map(repr, SCHEDULES))}")
    return name


def _number(key: str, value: Any, *, low: float = 0.0, inclusive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ParameterError(f"scaling[{key!r}] must be a number, got {value!r}")
    value = float(value)
    ok = low <= value < math.inf if inclusive else low < value < math.inf
    if not ok:
        bound = ">=" if inclusive else ">"
        raise ParameterError(f"scaling[{key!r}]={value!r} must be finite and {bound} {low:g}")
    return value


def _length(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ParameterError(f"scaling[{key!r}] must be a positive int, got {value!r}")
    return int(value)


def _factors(key: str, value: Any, count: int) -> tuple[float, ...]:
    if not isinstance(value, list | tuple | np.ndarray):
        raise ParameterError(f"scaling[{key!r}] must be a list of {count} numbers, "
                             f"got {value!r}")
    if len(value) != count:
        raise ParameterError(f"scaling[{key!r}] has {len(value)} entries, expected "
                             f"{count} (rotary_dim / 2)")
    return tuple(_number(f"{key}[{i}]", v) for i, v in enumerate(value))


def _check_keys(name: str, scaling: Mapping[str, Any]) -> None:
    required = _REQUIRED[name]
    allowed = _COMMON | required | _OPTIONAL.get(name, set())
    unknown = sorted(set(scaling) - allowed)
    if unknown:
        raise ParameterError(
            f"scaling has key {unknown[0]!r}, which rope_type={name!r} does not use "
            f"(it accepts {', '.join(sorted(allowed - {'type'}))})")
    if name == "ntk_alpha" and scaling.get("partial_rotary_factor", 1.0) != 1.0:
        raise ParameterError(
            f"scaling['partial_rotary_factor']={scaling['partial_rotary_factor']!r} with "
            "rope_type='ntk_alpha': Hunyuan's rotary layer rotates the whole head (transformers "
            "ignores the key there); drop it")
    for key in ("rope_theta", "partial_rotary_factor"):  # None is no value here (transformers
        if key in scaling and scaling[key] is None:  # multiplies or divides by it)
            raise ParameterError(f"scaling[{key!r}]=None must be a number (or leave it out)")
    missing = sorted(required - set(scaling))
    if missing:
        raise ParameterError(f"scaling for rope_type={name!r} is missing {missing[0]!r} "
                             f"(required: {', '.join(sorted(required))})")


def check_scaling(scaling: Mapping[str, Any] | None) -> None:
    """The checks of a scaling dict that need no head width: its schedule name, its keys and
    the values of the keys that do not depend on the head (spec files are checked so at load)."""
    name = schedule_type(scaling)
    if scaling is None:
        return
    _check_keys(name, scaling)
    if "rope_theta" in scaling:
        params.base(_number("rope_theta", scaling["rope_theta"]))
    for key in ("max_position_embeddings", "original_max_position_embeddings"):
        if scaling.get(key) is not None:
            _length(key, scaling[key])
    if name == "ntk_alpha":
        _number("alpha", scaling["alpha"])
    elif name != "default" and (name != "proportional" or scaling.get("factor") is not None):
        _factor(scaling, name)
    if scaling.get("partial_rotary_factor") is not None and name != "proportional":
        if _number("partial_rotary_factor", scaling["partial_rotary_factor"]) > 1:
            raise ParameterError(f"scaling['partial_rotary_factor']="
                                 f"{scaling['partial_rotary_factor']!r} must be <= 1")


def _resolve_base(base: float, scaling: Mapping[str, Any]) -> float:
    theta = scaling.get("rope_theta")
    if theta is None:
        return params.base(base)
    theta = params.base(_number("rope_theta", theta))
    if base not in (10000.0, theta):
        raise ParameterError(f"base={base!r} conflicts with scaling['rope_theta']={theta!r}: "
                             "give one")
    return theta


def _rotary_dim(dim: int, scaling: Mapping[str, Any], name: str) -> int:
    factor = scaling.get("partial_rotary_factor")
    if factor is None or name == "proportional":
        return dim
    factor = _number("partial_rotary_factor", factor)
    if factor > 1:
        raise ParameterError(f"scaling['partial_rotary_factor']={factor!r} must be <= 1")
    rd = int(dim * factor)
    if rd < 2 or rd % 2:
        raise ParameterError(
            f"scaling['partial_rotary_factor']={factor!r} of dim={dim} rotates {rd} features: "
            "the rotary width must be even and >= 2")
    return rd


@host_cache(maxsize=64)
def _default(rd: int, base: float) -> tuple[float, ...]:
    return tuple(base ** (-2.0 * i / rd) for i in range(rd // 2))


def _scaled(values: tuple[float, ...], by: float) -> tuple[float, ...]:
    return tuple(v / by for v in values)


def schedule(dim: int, *, base: float = 10000.0, scaling: Mapping[str, Any] | None = None,
             seq_len: int | None = None) -> Schedule:
    """Resolve ``scaling`` for a head of ``dim`` features (see :func:`rope_frequencies`)."""
    dim = params.width("dim", dim, minimum=2)
    if seq_len is not None:
        seq_len = params.size("seq_len", seq_len, minimum=1)
    name = schedule_type(scaling)
    scaling = dict(scaling or {})
    _check_keys(name, scaling)
    base = _resolve_base(base, scaling)
    rd = _rotary_dim(dim, scaling, name)
    if rd % 2:
        raise ParameterError(f"dim={dim} is odd: rotary embedding rotates pairs of features")
    return _SCHEDULES[name](rd, base, scaling, seq_len)


def _factor(scaling: Mapping[str, Any], name: str) -> float:
    factor = scaling.get("factor")
    if factor is None:  # Phi-3 / DeepSeek: the ratio of the two context lengths
        if scaling.get("max_position_embeddings") is None:
            raise ParameterError(
                f"scaling for rope_type={name!r} has factor=None: give factor, or "
                "max_position_embeddings beside original_max_position_embeddings")
        return (_length("max_position_embeddings", scaling["max_position_embeddings"])
                / _length("original_max_position_embeddings",
                          scaling["original_max_position_embeddings"]))
    factor = _number("factor", factor)
    if factor < 1:
        raise ParameterError(f"scaling['factor']={factor!r} must be >= 1")
    return factor


def _plain(rd: int, base: float, scaling: Mapping[str, Any], seq_len: int | None) -> Schedule:
    return Schedule(rd, _default(rd, base), 1.0)


def _linear(rd: int, base: float, scaling: Mapping[str, Any], seq_len: int | None) -> Schedule:
    return Schedule(rd, _scaled(_default(rd, base), _factor(scaling, "linear")), 1.0)


def ntk_base(rd: int, base: float, ratio: float, name: str, given: str) -> float:
    """``base * ratio^(d/(d-2))``, the NTK-scaled base; a ParameterError naming ``given`` (the
    parameter and its value) where it leaves float64 (the power raises OverflowError, or the
    product is inf)."""
    if rd <= 2:
        raise ParameterError(f"rope_type={name!r} needs a rotary width > 2 (base is raised "
                             f"to d/(d-2)), got {rd}")
    try:
        scaled = base * ratio ** (rd / (rd - 2))
    except OverflowError:
        scaled = math.inf
    # comparisons rather than math.isfinite: torch.compile may trace the ratio symbolically
    # (a layer's dynamic scaling reads it from the traced length), and NaN fails both
    if not -math.inf < scaled < math.inf:
        raise ParameterError(f"{given} with rope_type={name!r}: the scaled base {base!r} * "
                             f"{ratio!r}^({rd}/{rd - 2}) overflows float64")
    return scaled


def _ntk(rd: int, base: float, scaling: Mapping[str, Any], seq_len: int | None) -> Schedule:
    factor = _factor(scaling, "ntk")
    scaled = ntk_base(rd, base, factor, "ntk", f"scaling['factor']={factor!r}")
    return Schedule(rd, _default(rd, scaled), 1.0)


def _dynamic(rd: int, base: float, scaling: Mapping[str, Any], seq_len: int | None) -> Schedule:
    factor = _factor(scaling, "dynamic")
    key = next((k for k in ("max_position_embeddings", "original_max_position_embeddings")
                if scaling.get(k) is not None), None)
    if key is None:
        raise ParameterError(
            "scaling for rope_type='dynamic' needs max_position_embeddings (the model "
            "config's, the length the model was trained at): add it to the dict")
    trained = _length(key, scaling[key])
    length = max(seq_len or trained, trained)
    ratio = (factor * length / trained) - (factor - 1)
    scaled = ntk_base(rd, base, ratio, "dynamic",
                      f"scaling['factor']={factor!r} at seq_len={length}")
    return Schedule(rd, _default(rd, scaled), 1.0)


def _ntk_alpha(rd: int, base: float, scaling: Mapping[str, Any],
               seq_len: int | None) -> Schedule:
    """Hunyuan's fixed NTK-alpha: base' = base * alpha^(d/(d-2)) whatever the length."""
    alpha = _number("alpha", scaling["alpha"])
    scaled = ntk_base(rd, base, alpha, "ntk_alpha", f"scaling['alpha']={alpha!r}")
    return Schedule(rd, _default(rd, scaled), 1.0)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn(rd: int, base: float, scaling: Mapping[str, Any], seq_len: int | None) -> Schedule:
    factor = _factor(scaling, "yarn")
    trained = _length("original_max_position_embeddings",
                      scaling["original_max_position_embeddings"])
    attention = scaling.get("attention_factor")
    if attention is not None:
        attention = _number("attention_factor", attention)
    else:
        mscale, all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")
        # transformers uses the ratio only when both are truthy; otherwise 0.1 ln s + 1
        if mscale and all_dim:
            attention = (_yarn_mscale(factor, _number("mscale", mscale))
                         / _yarn_mscale(factor, _number("mscale_all_dim", all_dim)))
        else:
            attention = _yarn_mscale(factor)
    fast = _number("beta_fast", scaling["beta_fast"]) if scaling.get("beta_fast") is not None \
        else 32.0
    slow = _number("beta_slow", scaling["beta_slow"]) if scaling.get("beta_slow") is not None \
        else 1.0
    if fast < slow:
        raise ParameterError(f"scaling['beta_fast']={fast!r} must be >= beta_slow={slow!r}")
    truncate = params.flag("scaling['truncate']", scaling.get("truncate", True))

    def correction_dim(rotations: float) -> float:
        return rd * math.log(trained / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(fast), correction_dim(slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rd - 1)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp
    ramps = [min(max((i - low) / (high - low), 0.0), 1.0) for i in range(rd // 2)]
    inv_freq = tuple(theta / factor * ramp + theta * (1.0 - ramp)
                     for theta, ramp in zip(_default(rd, base), ramps, strict=True))
    return Schedule(rd, inv_freq, float(attention))


def _llama3(rd: int, base: float, scaling: Mapping[str, Any], seq_len: int | None) -> Schedule:
    factor = _factor(scaling, "llama3")
    low = _number("low_freq_factor", scaling["low_freq_factor"])
    high = _number("high_freq_factor", scaling["high_freq_factor"])
    if high < low:  # equal is an empty band (Llama 4 Scout): transformers only warns
        raise ParameterError(f"scaling['high_freq_factor']={high!r} must be >= "
                             f"low_freq_factor={low!r}")
    trained = _length("original_max_position_embeddings",
                      scaling["original_max_position_embeddings"])
    def scaled(theta: float) -> float:
        wavelength = 2 * math.pi / theta
        if wavelength < trained / high:
            return theta
        if wavelength > trained / low:
            return theta / factor
        if high == low:  # the wavelength on the empty band's edge keeps its frequency
            return theta
        smooth = (trained / wavelength - low) / (high - low)
        return (1 - smooth) * theta / factor + smooth * theta

    return Schedule(rd, tuple(scaled(theta) for theta in _default(rd, base)), 1.0)


def _longrope(rd: int, base: float, scaling: Mapping[str, Any], seq_len: int | None) -> Schedule:
    trained = _length("original_max_position_embeddings",
                      scaling["original_max_position_embeddings"])
    short = _factors("short_factor", scaling["short_factor"], rd // 2)
    long = _factors("long_factor", scaling["long_factor"], rd // 2)
    factor = _factor(scaling, "longrope")
    attention = scaling.get("attention_factor")
    if attention is not None:
        attention = _number("attention_factor", attention)
    else:
        attention = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(trained))
    plain = _default(rd, base)

    def divided(factors: tuple[float, ...]) -> tuple[float, ...]:
        return tuple(theta / f for theta, f in zip(plain, factors, strict=True))

    if seq_len is not None:
        return Schedule(rd, divided(long if seq_len > trained else short), float(attention))
    return Schedule(rd, divided(short), float(attention), divided(long), trained)


def _proportional(rd: int, base: float, scaling: Mapping[str, Any],
                  seq_len: int | None) -> Schedule:
    factor = _factor(scaling, "proportional") if scaling.get("factor") is not None else 1.0
    proportion = scaling.get("partial_rotary_factor", 1.0)
    proportion = _number("partial_rotary_factor", proportion)
    if proportion > 1:
        raise ParameterError(f"scaling['partial_rotary_factor']={proportion!r} must be <= 1")
    rotated = int(proportion * rd // 2)
    inv_freq = tuple((base ** (-2.0 * i / rd) if i < rotated else 0.0) / factor
                     for i in range(rd // 2))
    return Schedule(rd, inv_freq, 1.0)


_SCHEDULES = {"default": _plain, "linear": _linear, "ntk": _ntk, "dynamic": _dynamic,
              "yarn": _yarn, "llama3": _llama3, "longrope": _longrope,
              "proportional": _proportional, "ntk_alpha": _ntk_alpha}


def rope_frequencies(dim: int, *, base: float = 10000.0,
                     scaling: Mapping[str, Any] | None = None, seq_len: int | None = None,
                     dtype: Any = None, device: Any = None) -> tuple[Any, float]:
    """RoPE inverse frequencies and attention factor: ``(inv_freq, attention_factor)``.

    ``dim``: the head width (transformers' ``head_dim``); ``inv_freq`` has
    ``int(dim * partial_rotary_factor) / 2`` entries (``dim / 2`` for ``proportional``).
    ``scaling``: a transformers ``rope_scaling`` / ``rope_parameters`` dict passed as is
    (``rope_type`` or legacy ``type``: default, linear, ntk, dynamic, yarn, llama3, longrope,
    proportional, ntk_alpha, which ``dynamic`` with an ``alpha`` also means, as Hunyuan's
    checkpoints write it; ``rope_theta`` in the dict replaces ``base``). Keys a config keeps beside the
    dict that a schedule needs go into it: ``max_position_embeddings`` (``dynamic``, and
    ``yarn``/``longrope`` with ``factor=None``). ``seq_len``: the current length for
    ``dynamic`` and ``longrope`` (long factors only when ``seq_len >
    original_max_position_embeddings``; short when None, as transformers at init).
    ``attention_factor`` multiplies cos and sin (logits scale by its square).
    The frequencies are computed on the host in float64 and returned as ``dtype`` (float32 by
    default), an array of the library that defines ``dtype`` (NumPy when None), on ``device``.
    """
    if not isinstance(dim, bool):
        try:  # pins a symbolic int under torch.compile: the host arithmetic needs its value
            dim = operator.index(dim)
        except TypeError:
            pass  # not an integer: schedule() says so, naming dim
    resolved = schedule(dim, base=base, scaling=scaling, seq_len=seq_len)
    xp = array_api.namespace_of_dtype(dtype)
    out = array_api.output_dtype(xp, dtype)
    return array_api.asarray(xp, resolved.inv_freq, dtype=out, device=device), resolved.attention_factor
