"""llama.cpp / ggml rope: ``ggml_rope_ext`` (modes normal, neox) and ``ggml_rope_multi``
(mrope, imrope, vision) with ggml-cpu's arithmetic.

The angle of pair i is built the way ggml-cpu builds its cos/sin cache: ``theta = p`` then
``theta *= theta_scale`` pair after pair, in float32 (``theta_scale = powf(freq_base,
-2/n_dims)``), divided by the freq_factors tensor, then YaRN's blend ``freq_scale*theta`` vs
``theta`` by a ramp over the correction dims, and ``cos``/``sin`` in float32 times the attention
factor (times ``1 + 0.1 ln(1/freq_scale)`` when ``ext_factor != 0``). Everything that does not
depend on the positions (theta_scale, the correction dims, the ramp, the factors) is computed
on the host with float32 rounding at each step, as the C code rounds.

YaRN's blend is the fused multiply-add the compiler makes of it on a target with FMA
(aarch64, x86-64 with FMA: ggml's native and AVX2 builds): ``fmaf(theta_interp, 1 - ramp_mix,
fl32(theta_extrap * ramp_mix))``, as measured against ggml-python 0.0.45. With float64 at hand
(float64 x) it is emulated: the product of two float32 is exact in float64, the sum rounds to
float64 and then to float32. That double rounding differs from fmaf's single one only when the
float64 sum lands exactly on a float32 midpoint it did not start on, which needs the two terms
within about 2**24 of each other and the float64 sum's cut bits just so (a constructed case
exists; for YaRN's blends of real parameters tests/peers/test_engines.py finds the emulation equal
to the exact fmaf on every draw, and it is far rarer than the ulp by which the C library's
cosf already differs). In
float32 (no float64) the blend rounds twice, as a build without FMA computes it (up to 1.2e-3
apart at position 2**20).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np  # host-side float32 rounding of static parameters only

from .. import array_api, native, params
from ..errors import ParameterError

__all__ = ["ggml_rope"]

MODES = ("normal", "neox", "mrope", "imrope", "vision")
MULTI = ("mrope", "imrope", "vision")
INT32 = 2**31  # positions lie in [-2**31, 2**31): ggml's int32


def _f32(x: float) -> float:
    """x rounded to float32 (to nearest, ties to even), as a Python float: plain Python, so
    torch.compile folds it (NumPy scalars would be traced into the graph)."""
    x = float(x)
    if x == 0 or not -math.inf < x < math.inf:
        return x
    mantissa, exponent = math.frexp(x)
    return math.ldexp(round(mantissa * 2.0**24) / 2.0**24, exponent)



FLOAT32_MAX = float(np.finfo(np.float32).max)


def _number(name: str, value: Any, *, positive: bool = False) -> float:
    """A float32 parameter of ggml: a finite number within float32's range (``positive``:
    > 0, and not rounding to 0 in float32)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ParameterError(f"{name} must be a number, got {value!r}")
    value = float(value)  # a concrete float (pins a symbolic one under torch.compile)
    # plain Python comparisons (torch.compile traces NumPy scalars): float32 rounds 2**-150
    # and below to 0
    if positive and not (2.0**-150 < value < math.inf):
        raise ParameterError(f"{name}={value!r} must be a finite number > 0 (> 0 in float32 "
                             "too: ggml's rope parameters are float32)")
    if not -math.inf < value < math.inf:
        raise ParameterError(f"{name}={value!r} must be finite")
    if abs(value) > FLOAT32_MAX:
        raise ParameterError(f"{name}={value!r} is beyond float32's range (ggml's rope "
                             "parameters are float32)")
    return value


def _sections(mode: str, sections: Any) -> tuple[int, int, int, int] | None:
    if mode not in MULTI:
        if sections is not None:
            raise ParameterError(f"sections={sections!r} needs mode 'mrope', 'imrope' or "
                                 f"'vision'; mode={mode!r} has one position per token")
        return None
    if (not isinstance(sections, list | tuple) or len(sections) != 4
            or any(isinstance(s, bool) or not isinstance(s, int | np.integer) for s in sections)):
        raise ParameterError(f"mode={mode!r} needs sections: a list of 4 ints (pairs per t, h, "
                             f"w, e section), got {sections!r}")
    if any(s < 0 for s in sections) or sum(sections[:3]) == 0:
        raise ParameterError(f"sections={list(sections)!r} must be >= 0 with one of the first "
                             "three > 0")
    return tuple(int(s) for s in sections)  # type: ignore[return-value]


def corr_dims(n_dims: int, n_ctx_orig: int, freq_base: float, beta_fast: float,
              beta_slow: float) -> tuple[float, float]:
    """ggml_rope_yarn_corr_dims: the pair indices where YaRN's ramp starts and ends, in
    float32 (logf) and clamped to [0, n_dims - 1]."""
    def corr_dim(n_rot: float) -> float:
        inner = _f32(_f32(n_ctx_orig) / _f32(_f32(_f32(n_rot) * 2.0) * _f32(math.pi)))
        return _f32(_f32(n_dims * _f32(math.log(inner)))
                    / _f32(2.0 * _f32(math.log(_f32(freq_base)))))

    return (float(max(0, math.floor(corr_dim(beta_fast)))),
            float(min(n_dims - 1, math.ceil(corr_dim(beta_slow)))))


def _ladders(n_pairs: int, mode: str, sections: tuple[int, ...] | None) -> list[tuple[int, int]]:
    """For each pair, (position row, steps of theta_scale since that row's ladder started)."""
    if sections is None:
        return [(0, i) for i in range(n_pairs)]
    total = sum(sections)
    starts = (0, sections[0], sections[0] + sections[1], sections[0] + sections[1] + sections[2])
    out = []
    for i in range(n_pairs):
        sector = i % total
        if mode == "imrope":
            pick = next((k for k in (1, 2, 0) if sector % 3 == k and sector < 3 * sections[k]), 3)
        else:
            pick = sum(sector >= s for s in starts[1:])
        # vision: each row's ladder restarts where its section starts, in every period
        out.append((pick, sector - starts[pick] if mode == "vision" else i))
    return out


def ggml_rope(x: Any, positions: Any, *, n_dims: int | None = None, mode: str = "normal",
              freq_base: float = 10000.0, freq_scale: float = 1.0, ext_factor: float = 0.0,
              attn_factor: float = 1.0, beta_fast: float = 32.0, beta_slow: float = 1.0,
              n_ctx_orig: int = 0, sections: Sequence[int] | None = None,
              freq_factors: Sequence[float] | None = None) -> Any:
    """Rotate ``x`` ``[..., seq, dim]`` as ggml's rope does (ggml-cpu's float32 angles).

    ``positions``: ``[seq]`` ints (normal, neox) or ``[4, seq]`` (t, h, w, e ids: mrope,
    imrope, vision). ``n_dims``: rotated features (``dim`` by default; ``dim / 2`` pairs of
    ``(i, i + n_dims)`` for vision). ``mode``: ``normal`` pairs ``(2i, 2i+1)``, the others
    ``(i, i + n_dims/2)``. ``freq_factors``: ggml's ``rope_freqs`` tensor, dividing theta_i
    (llama3, LongRoPE). ``ext_factor != 0`` turns YaRN on (ramp over
    ``ggml_rope_yarn_corr_dims(n_dims, n_ctx_orig, freq_base, beta_fast, beta_slow)`` and the
    extra attention factor ``1 + 0.1 ln(1/freq_scale)``).
    """
    xp = array_api.namespace(x=x, positions=positions)
    if positions is None:
        raise ParameterError("positions must be given: ggml's rope takes one position per "
                             "token ([seq] ints; [4, seq] for mrope, imrope, vision)")
    if not hasattr(x, "dtype"):
        raise ParameterError(f"x must be an array, got {type(x).__name__} (the "
                             "posenc.backends.<framework> functions convert lists)")
    array_api.check_floating(xp, "x", x)
    params.choice("mode", mode, MODES)
    n_dims = _rotated_width(x, n_dims, mode)
    yarn = _Yarn.checked(freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow,
                         n_ctx_orig)
    secs = _sections(mode, sections)
    n_pairs = n_dims if mode == "vision" else n_dims // 2
    factors = _freq_factors(freq_factors, n_pairs)
    positions = _checked_positions(xp, x, positions, secs, mode)
    ops = _Float32(xp, array_api.device_of(x), array_api.compute_dtype(xp, x.dtype))
    cos, sin = _cos_sin(ops, positions, yarn, factors, n_dims, _ladders(n_pairs, mode, secs),
                        multi=secs is not None)
    return _rotate(ops, x, cos, sin, _pairs(mode, n_dims, n_pairs))


# -- arguments ----------------------------------------------------------------------------

def _rotated_width(x: Any, n_dims: int | None, mode: str) -> int:
    """``n_dims`` checked against ``x`` ``[..., seq, dim]`` (``dim`` or ``dim / 2`` for vision
    by default)."""
    if x.ndim < 2:
        raise ParameterError(f"x must be [..., seq, dim], got shape {tuple(x.shape)}")
    dim = int(x.shape[-1])
    if n_dims is None:  # the whole head: an error names x's width, which set it
        if dim < 2 or (dim % 2 and mode != "vision"):
            raise ParameterError(
                f"x has shape {tuple(x.shape)}: its width dim={dim} "
                + ("leaves no pair to rotate" if dim < 2 else "is odd: rope rotates pairs of "
                   "features (give n_dims for a partial rotary)"))
        n_dims = dim // 2 if mode == "vision" else dim
    n_dims = params.integer("n_dims", n_dims, minimum=2)
    if n_dims % 2 and mode != "vision":
        raise ParameterError(f"n_dims={n_dims} is odd: rope rotates pairs of features")
    if mode == "vision" and 2 * n_dims != dim:
        raise ParameterError(f"mode='vision' needs n_dims = dim / 2 = {dim / 2:g}, got {n_dims}")
    if n_dims > dim:
        raise ParameterError(f"n_dims={n_dims} exceeds the head width dim={dim}")
    return n_dims


@dataclass(frozen=True)
class _Yarn:
    """ggml's float32 frequency and YaRN parameters, checked."""

    freq_base: float
    freq_scale: float
    ext_factor: float
    attn_factor: float
    beta_fast: float
    beta_slow: float
    n_ctx_orig: int

    @classmethod
    def checked(cls, freq_base: Any, freq_scale: Any, ext_factor: Any, attn_factor: Any,
                beta_fast: Any, beta_slow: Any, n_ctx_orig: Any) -> _Yarn:
        yarn = cls(_number("freq_base", freq_base, positive=True),
                   _number("freq_scale", freq_scale, positive=True),
                   _number("ext_factor", ext_factor), _number("attn_factor", attn_factor),
                   _number("beta_fast", beta_fast), _number("beta_slow", beta_slow),
                   params.size("n_ctx_orig", n_ctx_orig, minimum=0))
        if yarn.ext_factor != 0 and yarn.n_ctx_orig < 1:
            raise ParameterError(f"ext_factor={yarn.ext_factor!r} (YaRN) needs n_ctx_orig >= 1, "
                                 f"got {yarn.n_ctx_orig}")
        if yarn.ext_factor != 0 and _f32(yarn.freq_base) == 1:
            raise ParameterError(f"freq_base={yarn.freq_base!r} with ext_factor="
                                 f"{yarn.ext_factor!r} (YaRN): the correction dims divide by "
                                 "ln(freq_base) = 0")
        return yarn

    def ramp(self, n_dims: int, n_pairs: int) -> tuple[list[float], float]:
        """``(keep, mscale)`` on the host, float32 as ggml-cpu: the weight of theta_extrap per
        pair and the attention factor."""
        mscale = _f32(self.attn_factor)
        keep = [0.0] * n_pairs
        if self.ext_factor == 0:
            return keep, mscale
        low, high = corr_dims(n_dims, self.n_ctx_orig, self.freq_base, self.beta_fast,
                              self.beta_slow)
        width = max(_f32(0.001), _f32(high - low))
        keep = [_f32(_f32(1.0 - min(1.0, max(0.0, _f32(_f32(i - low) / width))))
                     * _f32(self.ext_factor)) for i in range(n_pairs)]
        log_scale = _f32(math.log(_f32(1.0 / _f32(self.freq_scale))))
        return keep, _f32(mscale * _f32(1.0 + _f32(_f32(0.1) * log_scale)))


def _freq_factors(freq_factors: Any, n_pairs: int) -> list[float]:
    if freq_factors is None:
        return [1.0] * n_pairs
    if not isinstance(freq_factors, list | tuple | np.ndarray) or len(freq_factors) != n_pairs:
        raise ParameterError(f"freq_factors must be a list of {n_pairs} numbers (one per "
                             f"rotated pair), got {freq_factors!r}")
    return [_f32(_number(f"freq_factors[{i}]", v, positive=True))
            for i, v in enumerate(freq_factors)]


def _checked_positions(xp: Any, x: Any, positions: Any, secs: Any, mode: str) -> Any:
    if not hasattr(positions, "dtype"):
        positions = array_api.asarray(xp, positions, device=array_api.device_of(x))
    if not xp.isdtype(positions.dtype, "integral"):  # ggml's positions are an int32 tensor
        raise ParameterError(f"positions must have an integer dtype (ggml's positions are "
                             f"int32), got {array_api.dtype_name(positions.dtype)}")
    seq = int(x.shape[-2])
    expected = (seq,) if secs is None else (4, seq)
    if tuple(positions.shape) != expected:
        raise ParameterError(f"positions has shape {tuple(positions.shape)}, expected "
                             f"{list(expected)} for mode={mode!r} and x of shape "
                             f"{tuple(x.shape)}")
    array_api.assert_position_range(xp, positions, compute=xp.float64, low=-INT32,
                                    high=INT32)
    return positions


# -- angles -------------------------------------------------------------------------------

class _Float32:
    """float32 arithmetic as C does it, in the namespace of ``x``."""

    def __init__(self, xp: Any, device: Any, compute: Any) -> None:
        self.xp, self.device, self.compute = xp, device, compute
        self.exact = compute == xp.float64

    def const(self, values: Any) -> Any:
        return array_api.asarray(self.xp, values, dtype=self.xp.float32, device=self.device)

    def op(self, fn: Any, a: Any, b: Any) -> Any:
        """One float32 operation as C does it. With float64 at hand: exact in float64, then
        rounded once to float32 (innocuous double rounding), which no compiler may
        reassociate or contract; XLA's jit folds a ladder of constant multiplications and
        its vectorised float32 division and cos may be an ulp off."""
        if not self.exact:
            return fn(a, b)
        xp = self.xp
        return self.to_f32(fn(xp.astype(a, xp.float64), xp.astype(b, xp.float64)))

    def to_f32(self, wide: Any) -> Any:
        """float64 ``wide`` rounded to float32, in a way the library's compiler keeps."""
        rounded = native.of(wide).rounded_to_float32(wide)
        return self.xp.astype(wide, self.xp.float32) if rounded is None else rounded

    def mul(self, a: Any, b: Any) -> Any:
        return self.op(lambda u, v: u * v, a, b)


def _theta_extrap(ops: _Float32, positions: Any, theta_scale: float,
                  ladders: list[tuple[int, int]], factors: list[float], multi: bool) -> Any:
    """``theta = p`` times theta_scale pair after pair (per position row), over freq_factors."""
    xp, f32 = ops.xp, ops.xp.float32
    rows = [xp.astype(positions[k, :], f32) for k in range(4)] if multi else \
        [xp.astype(positions, f32)]
    scale = ops.const(float(theta_scale))
    steps = max(s for _, s in ladders) + 1
    powers = []  # powers[k][s]: row k after s multiplications by theta_scale, in float32
    for row in rows:
        ladder = [row]
        for _ in range(steps - 1):
            ladder.append(ops.mul(ladder[-1], scale))
        powers.append(ladder)
    ladder = xp.stack([powers[k][s] for k, s in ladders], axis=-1)
    return ops.op(lambda u, v: u / v, ladder, ops.const([float(f) for f in factors]))


def _cos_sin(ops: _Float32, positions: Any, yarn: _Yarn, factors: list[float], n_dims: int,
             ladders: list[tuple[int, int]], *, multi: bool) -> tuple[Any, Any]:
    """ggml-cpu's cos/sin cache in the compute dtype, attention factor included."""
    xp = ops.xp
    theta_scale = _f32(math.pow(_f32(yarn.freq_base), _f32(-2.0 / n_dims)))
    keep, mscale = yarn.ramp(n_dims, len(factors))
    theta_extrap = _theta_extrap(ops, positions, theta_scale, ladders, factors, multi)
    theta = ops.mul(ops.const(_f32(yarn.freq_scale)), theta_extrap)
    if yarn.ext_factor != 0:  # fmaf(theta_interp, 1 - ramp_mix, fl32(theta_extrap * ramp_mix))
        extrap = ops.mul(theta_extrap, ops.const([float(k) for k in keep]))
        interp = ops.const([_f32(1.0 - k) for k in keep])
        if ops.exact:  # the product exact in float64, one rounding of the sum (see above)
            wide = xp.astype(theta, xp.float64) * xp.astype(interp, xp.float64)
            theta = ops.to_f32(wide + xp.astype(extrap, xp.float64))
        else:
            theta = ops.mul(theta, interp) + extrap
    if ops.exact:  # cosf as correctly rounded as a float32 result can be
        wide = xp.astype(theta, xp.float64)
        cos, sin = ops.to_f32(xp.cos(wide)), ops.to_f32(xp.sin(wide))
    else:
        cos, sin = xp.cos(theta), xp.sin(theta)
    cos, sin = ops.mul(cos, ops.const(float(mscale))), ops.mul(sin, ops.const(float(mscale)))
    return xp.astype(cos, ops.compute), xp.astype(sin, ops.compute)


# -- rotation -----------------------------------------------------------------------------

def _pairs(mode: str, n_dims: int, n_pairs: int) -> tuple[list[int], list[int]]:
    """The features of each pair per mode: ``(2i, 2i+1)`` for normal, ``(i, i + n_dims/2)``
    for neox and the multi modes, ``(i, i + n_dims)`` for vision."""
    if mode == "normal":
        return [2 * i for i in range(n_pairs)], [2 * i + 1 for i in range(n_pairs)]
    offset = n_dims if mode == "vision" else n_dims // 2
    return list(range(n_pairs)), [i + offset for i in range(n_pairs)]


def _rotate(ops: _Float32, x: Any, cos: Any, sin: Any,
            pairs: tuple[list[int], list[int]]) -> Any:
    xp, device, dim = ops.xp, ops.device, int(x.shape[-1])
    a, b = pairs
    rest = [j for j in range(dim) if j not in set(a) | set(b)]
    axis = x.ndim - 1

    def take(index: list[int]) -> Any:
        return xp.astype(xp.take(x, array_api.asarray(xp, index, dtype=xp.int64, device=device),
                                 axis=axis), ops.compute)

    xa, xb = take(a), take(b)
    parts = [xa * cos - xb * sin, xa * sin + xb * cos]
    if rest:
        parts.append(take(rest))
    order = a + b + rest
    inverse = sorted(range(dim), key=order.__getitem__)  # inverse[order[k]] = k
    joined = xp.concat(parts, axis=axis)
    out = xp.take(joined, array_api.asarray(xp, inverse, dtype=xp.int64, device=device), axis=axis)
    return xp.astype(out, x.dtype)
