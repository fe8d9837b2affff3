"""The hostile-input fuzz of tests/backends/test_hostile_inputs.py: for every public function a valid
call and the parameters it declares, Hypothesis strategies of bad values by declared kind, and
the oracle a call must satisfy.

A valid call comes from the spec (the smallest golden case that spells the parameter out, its
inputs generated as the goldens are), or from :data:`MANUAL` for a function without a spec.
One parameter at a time is replaced by a hostile value drawn for its kind (spec ``type`` for
parameters, ``kind`` for inputs). The call must then end in

- a :class:`posenc.ParameterError` (or :class:`MixedArrayLibrariesError` for arrays of two
  libraries) whose message names that parameter; or
- a result equal to the NumPy float64 reference's for the same arguments (the value is
  legitimately accepted), and never one computed from a non-finite scalar parameter.

Anything else (another exception, a result the reference refuses or does not give, an
allocation past the address-space head room, a call running past its time) is a
:class:`Finding` naming the function, the parameter and the value.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import resource
import signal
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

import posenc
from posenc import golden, inputs
from posenc.catalog import reference_function, spec_for_function
from posenc.errors import MixedArrayLibrariesError, ParameterError
from posenc.specs import Spec, resolve_params

NAN, INF = math.nan, math.inf
HEADROOM = 3 * 2**30  # bytes of address space a call may add: far past any valid call here
SECONDS = float(os.environ.get("POSENC_HOSTILE_SECONDS", 20))  # longer: a finding (a hang)

# bad values by declared kind; each list mixes refusable values with a few legitimate ones
INTEGERS = [NAN, INF, -INF, 0, -1, -(2**31), 0.5, 2.5, 3.0, 2**31, 2**40, 2**63, 2**64, 10**30,
            True, False, "2", [2], None, np.int64(2), np.float64(2.0), np.uint64(2**63)]
NUMBERS = [NAN, INF, -INF, 0, 0.0, -0.0, -1, -1.5, 1e-300, 5e-324, 1e30, 1e300, 65520.0,
           3.4e38 * 10, True, "1.0", [1.0], None, np.float32(NAN), np.float16(2.0), 1j]
BOOLEANS = [0, 1, "no", "False", None, NAN, np.bool_(True), [True]]
STRINGS = ["", "nope", "HALF", " half", 3, None, ["half"], b"half", NAN]
SEQUENCES = [[], [0], [-1, 2], [1.5, 2.5], [2**31, 2], [NAN], "ab", 3, None, [[1, 2]],
             [True, 1], (1, 1, 1), [10**30], np.array([2, 2])]
OBJECTS = [3, "linear", [], {}, {"rope_type": "nope"}, {"bogus": 1}, None, {"rope_type": 3}]


def _names(text: str, name: str) -> bool:
    """Whether ``text`` names ``name`` as a word (``x`` in ``x.shape``, not in ``max``)."""
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", text) is not None


class Finding(AssertionError):
    """What a call did wrong, naming the function, the parameter and the value."""

    def __init__(self, function: str, parameter: str, value: Any, problem: str) -> None:
        super().__init__(f"{function}: {parameter}={_show(value)} {problem}")


def _show(value: Any) -> str:
    if isinstance(value, np.ndarray):
        flat = value.ravel()
        return (f"array(shape={value.shape}, dtype={value.dtype}, values="
                f"{flat[:6].tolist()}{'...' if flat.size > 6 else ''})")
    text = repr(value)
    return text if len(text) < 200 else text[:200] + "..."


@dataclass
class Target:
    """One public function: how to call it, its reference (None: no reference, a result is
    only checked for non-finite values) and a valid call per parameter."""

    name: str
    call: Callable[..., Any]
    reference: Callable[..., Any] | None
    kinds: dict[str, str]  # parameter -> integer, number, boolean, string, array, object,
    # float-input, int-input, bool-input
    bases: dict[str, dict[str, Any]]  # parameter -> a valid call spelling it out
    nullable: frozenset[str] = frozenset()
    data: frozenset[str] = frozenset()  # float inputs: NaN there is data, not a bad argument
    tolerance: float = 1e-6
    dtype_parameter: bool = False

    @property
    def parameters(self) -> list[str]:
        return sorted(self.kinds)


# ---------------------------------------------------------------------------------------------
# valid calls from the specs

def _case_inputs(spec: Spec, case: Any) -> dict[str, Any]:
    arrays = {}
    for decl in spec.inputs:
        gen = case.inputs.get(decl.name)
        arrays[decl.name] = None if gen is None else inputs.generate(gen, decl.kind)
    return arrays


def _size(arrays: Mapping[str, Any]) -> int:
    return sum(a.size for a in arrays.values() if a is not None)


def spec_target(name: str, call: Callable[..., Any], spec: Spec) -> Target:
    cases = sorted(((_size(_case_inputs(spec, c)), i, c) for i, c in enumerate(spec.cases)),
                   key=lambda t: t[:2])
    kinds: dict[str, str] = {}
    nullable = set()
    for decl in spec.inputs:
        kinds[decl.name] = f"{decl.kind}-input"
        if decl.optional:
            nullable.add(decl.name)
    for key, decl in spec.parameters.items():
        types = decl.get("type")
        types = [types] if isinstance(types, str) else list(types or ["number"])
        if "null" in types:
            nullable.add(key)
        kinds[key] = next(t for t in types if t != "null")
    bases = {}
    for key in kinds:
        chosen = next((c for _, _, c in cases if c.params.get(key) is not None
                       or c.inputs.get(key) is not None), cases[0][2])
        bases[key] = {**_case_inputs(spec, chosen), **resolve_params(spec, chosen.params)}
    return Target(name, call, reference_function(spec), kinds, bases, frozenset(nullable),
                  frozenset(d.name for d in spec.inputs if d.kind == "float"),
                  dtype_parameter=spec.dtype_parameter)


# ---------------------------------------------------------------------------------------------
# hostile values

def _strict(array: np.ndarray) -> Any:
    import array_api_strict

    return array_api_strict.asarray(array)


def _array_variants(base: np.ndarray, kind: str) -> list[Any]:
    """Bad arrays for an input whose valid value is ``base``."""
    out: list[Any] = [base.tolist(), 3, "x", None]
    if base.ndim:
        out += [base[..., :0], base[:0], base[..., :-1] if base.shape[-1] else base,
                base[0], base[None], np.concatenate([base, base[..., :1]], axis=-1)]
    else:
        out += [base[None]]
    out += [base.astype(np.bool_), base.astype(np.complex128), base.astype(np.float16),
            np.asfortranarray(base)]
    if base.size:
        with contextlib.suppress(ImportError):
            out.append(_strict(base))
    if kind == "float":
        out += [base.astype(np.int64), base.astype(np.float32), _poke(base, NAN),
                _poke(base, INF), _poke(base, 1e300), _poke(base, 7e4)]
    else:
        out += [base.astype(np.float64) + 0.5, base.astype(np.float32),
                _poke(base.astype(np.float64), NAN), _poke(base.astype(np.float64), INF),
                _poke(base, -1), _poke(base, -(2**31) - 1), _poke(base, 2**31),
                _poke(base, 2**40), base.astype(np.uint64) + np.uint64(2**63),
                base.astype(np.int8), base.astype(np.uint8)]
    return out


def _poke(base: np.ndarray, value: Any) -> np.ndarray:
    """``base`` with its last entry replaced by ``value`` (dtype widened to hold it)."""
    out = np.array(base, dtype=np.result_type(base.dtype, np.min_scalar_type(value))
                   if not isinstance(value, float) else np.result_type(base.dtype, np.float64))
    if out.size:
        out.reshape(-1)[-1] = value
    return out


def _object_variants(base: Any) -> list[Any]:
    """Wrong objects, and ``base`` (a dict) with one key, or one key of a dict inside it,
    replaced by a bad value."""
    out = list(OBJECTS)
    if isinstance(base, Mapping) and base:
        for key in sorted(base):
            for bad in (NAN, INF, -1, 0, 1e30, "x", None, True, [1]):
                out.append({**base, key: bad})
            if isinstance(base[key], Mapping):
                out += [{**base, key: inner} for inner in _object_variants(base[key])
                        if isinstance(inner, Mapping) and inner]
        out.append({**base, "bogus_key": 1})
    return out


def changed_keys(base: Any, value: Any) -> list[str]:
    """The keys (at any depth) where the dict ``value`` differs from the dict ``base``."""
    if not (isinstance(base, Mapping) and isinstance(value, Mapping)):
        return []
    out = []
    for key in {*base, *value}:
        if key not in base or key not in value:
            out.append(str(key))
        elif isinstance(base[key], Mapping) and isinstance(value[key], Mapping):
            inner = changed_keys(base[key], value[key])
            out += [str(key), *inner] if inner else []
        elif not _same(base[key], value[key]):
            out.append(str(key))
    return out


def _same(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # arrays
        return a is b


def hostile(target: Target, parameter: str) -> st.SearchStrategy[Any]:
    kind = target.kinds[parameter]
    base = target.bases[parameter].get(parameter)
    if kind.endswith("-input"):
        if base is None:
            return st.sampled_from([3, "x", [1.0], np.zeros(0), np.zeros((2, 3))])
        return st.sampled_from(_array_variants(np.asarray(base), kind.removesuffix("-input")))
    values = {"integer": INTEGERS, "number": NUMBERS, "boolean": BOOLEANS, "string": STRINGS,
              "array": SEQUENCES}.get(kind)
    if values is None:
        return st.sampled_from(_object_variants(base))
    return st.sampled_from(values)


# ---------------------------------------------------------------------------------------------
# the oracle

@contextlib.contextmanager
def bounded() -> Iterator[None]:
    """At most :data:`HEADROOM` more bytes of address space and :data:`SECONDS` of time: an
    allocation past them is a MemoryError, a hang an alarm, both findings."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    size = _address_space()
    limit = size + HEADROOM if size else soft
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))

    def alarm(signum: int, frame: Any) -> None:
        raise TimeoutError(f"ran past {SECONDS} s")
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _address_space() -> int:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _non_finite(value: Any) -> bool:
    """Whether a scalar (or a dict of them, at any depth) holds NaN or an infinity."""
    if isinstance(value, Mapping):
        return any(_non_finite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_non_finite(v) for v in value)
    if isinstance(value, float | np.floating | complex):
        return not np.isfinite(value)
    return False


def _plain(value: Any) -> Any:
    """A result as dicts, lists and floats (arrays flattened; dataclasses as their fields)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray | np.generic):
        return np.asarray(value, dtype=np.complex128).ravel().tolist() \
            if np.asarray(value).dtype.kind in "fc" else []
    if hasattr(value, "__dataclass_fields__"):
        return _plain({k: getattr(value, k) for k in value.__dataclass_fields__})
    return value


def _arrays(value: Any) -> list[Any]:
    """The arrays of a result (a tuple's too), as NumPy sees them."""
    if isinstance(value, tuple | list):
        return [a for v in value for a in _arrays(v)]
    return [_to_numpy(value)] if hasattr(value, "dtype") else []


def _holds_extreme(value: Any) -> bool:
    """Whether an array argument holds NaN, an infinity or a value near float64's limit."""
    try:
        values = np.asarray(_to_numpy(value), dtype=complex)
    except (TypeError, ValueError):
        return False
    return not (np.isfinite(values) & (np.abs(values) < 1e30)).all()


def _to_numpy(value: Any) -> Any:
    """An argument as the reference takes it: NumPy arrays, Python scalars (a NumPy scalar
    parameter is a plain number to a function, not float16 arithmetic in the reference)."""
    if isinstance(value, np.generic):
        return value.item()
    if hasattr(value, "__array_namespace__") and not isinstance(value, np.ndarray):
        return np.asarray(value)
    return value


def _as_result(value: Any) -> np.ndarray:
    if isinstance(value, tuple | list):
        return golden.output_array([_as_result(v) for v in value])
    return golden.output_array(np.asarray(_to_numpy(value)))


def check(target: Target, call: Callable[..., Any], parameter: str, value: Any) -> None:
    """Call ``call`` (the function, or a backend's binding of it) on the valid call with
    ``parameter=value``; raise :class:`Finding` unless the outcome is one the module docstring
    allows."""
    kwargs = {**target.bases[parameter], parameter: value}

    def finding(problem: str) -> Finding:
        return Finding(target.name, parameter, value, problem)
    try:
        with bounded():
            out = call(**kwargs)
            result = None if target.reference is None else _as_result(out)
    except (ParameterError, MixedArrayLibrariesError) as exc:
        message = str(exc)
        words = [parameter, *changed_keys(target.bases[parameter].get(parameter), value)]
        if not any(_names(message, w) for w in words):
            raise finding(f"raised {type(exc).__name__} that does not name {parameter}: "
                          f"{message}") from None
        return
    except Exception as exc:
        raise finding(f"raised {type(exc).__name__}: {exc}") from None
    if _non_finite(value) and parameter not in target.data:
        raise finding("was accepted: a non-finite parameter must be refused")
    if target.reference is None or result is None:
        if _non_finite(_plain(out)) and not any(_non_finite(_plain(v)) for v in kwargs.values()):
            raise finding(f"gave a non-finite result from finite arguments: {_show(out)}")
        return
    ref_kwargs = {k: _to_numpy(v) for k, v in kwargs.items()}
    try:
        with bounded():
            want = golden.output_array(target.reference(**ref_kwargs))
    except Exception as exc:
        raise finding(f"was accepted, but the reference refuses it ({type(exc).__name__}: "
                      f"{exc})") from None
    narrow = np.asarray(_to_numpy(out)).dtype if not isinstance(out, tuple | list) else None
    if narrow is not None and narrow.kind == "f" and narrow.itemsize < 8 \
            and want.shape == result.shape:
        with np.errstate(over="ignore"):  # the reference's values as the result's dtype holds
            want = want.astype(narrow).astype(np.float64)  # them: past float32, infinite
    if result.shape != want.shape:
        raise finding(f"gave shape {result.shape}, the reference {want.shape}")
    finite = np.isfinite(want) & np.isfinite(result)
    scale = max(1.0, float(np.abs(want[finite]).max(initial=0.0)))
    tol = _tolerance(target, kwargs, out) * scale
    bad = ~np.isclose(result, want, rtol=0, atol=tol, equal_nan=True)
    if parameter in target.data and _holds_extreme(value) and _tolerance(target, {}, out) < 1e-5:
        # NaN, inf or 1e300 in the data: a vectorised implementation spreads it (or its
        # overflow) further than a loop (NaN * 0 in a padded convolution, inf - inf in a
        # product); the finite entries of both must still agree
        bad &= finite
    if parameter in target.data and _holds_extreme(value) and _tolerance(target, {}, out) >= 1e-5:
        return  # the data does not fit the dtype the backend computes in: nothing to compare
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise finding(f"gave {result.ravel()[i]!r} at flat index {i}, the reference "
                      f"{want.ravel()[i]!r} (tolerance {tol:.3g})")


def _tolerance(target: Target, kwargs: Mapping[str, Any], out: Any) -> float:
    """float64 results within 1e-6 of the reference (scaled to its magnitude), float32 within
    1e-3, float16 / bfloat16 within 2e-2: inputs of a narrower dtype compute in it, and so
    does a backend that holds float64 inputs as float32 (JAX without x64)."""
    widths = [np.dtype(v.dtype).itemsize for v in kwargs.values()
              if isinstance(v, np.ndarray) and v.dtype.kind == "f"]
    widths += [a.dtype.itemsize for a in map(np.asarray, _arrays(out)) if a.dtype.kind == "f"]
    narrow = min(widths, default=8)
    if target.dtype_parameter and kwargs.get("dtype") is None:
        narrow = min(narrow, 4)  # float32 by default
    return {8: target.tolerance, 4: 1e-3}.get(narrow, 2e-2)


@dataclass
class Manual:
    """A function without a spec: its valid call(s) and the kinds of its parameters."""

    call: Callable[..., Any]
    kinds: dict[str, str]
    base: dict[str, Any]
    bases: dict[str, dict[str, Any]] = field(default_factory=dict)
    nullable: frozenset[str] = frozenset()

    def target(self, name: str) -> Target:
        bases = {k: self.bases.get(k, self.base) for k in self.kinds}
        return Target(name, self.call, None, dict(self.kinds), bases, self.nullable)


def manual_targets() -> dict[str, Target]:
    """Functions without a spec: qk_permutation_indices, layer_rope_parameters and the public
    functions of posenc.dialects."""
    from posenc import dialects
    from posenc.dialects.named import NAMED

    llama = NAMED["llama-3.1-8b"]
    gemma = NAMED["gemma-3-4b"] if "gemma-3-4b" in NAMED else next(iter(NAMED.values()))
    layer = dialects.rope_layers(llama)["all"]
    ggml = dialects.translate({**llama, "rope_scaling": None, "rope_parameters": None}, "ggml")
    yarn = {"freq_base": 10000.0, "freq_scale": 0.25, "ext_factor": 1.0, "n_ctx_orig": 4096,
            "n_dims": 64, "mode": "neox", "attn_factor": 1.0, "beta_fast": 32.0,
            "beta_slow": 1.0}
    config_keys = {"config": "object"}
    manuals = {
        "qk_permutation_indices": Manual(
            posenc.qk_permutation_indices,
            {"features": "integer", "n_heads": "integer", "to": "string",
             "rotary_dim": "integer", "rope_slice": "string"},
            {"features": 16, "n_heads": 2, "to": "half", "rotary_dim": None,
             "rope_slice": "first"}, nullable=frozenset({"rotary_dim"})),
        "layer_rope_parameters": Manual(
            posenc.layer_rope_parameters, {**config_keys, "layer": "integer"},
            {"config": dict(gemma), "layer": 0}, nullable=frozenset({"layer"})),
        "dialects.translate": Manual(
            dialects.translate, {"config": "object", "to": "string", "max_positions": "integer",
                                 "seq_len": "integer", "n_ctx": "integer", "mode": "string"},
            {"config": dict(llama), "to": "onnx", "max_positions": 16, "seq_len": None},
            bases={"n_ctx": {"config": dict(llama), "to": "ggml", "n_ctx": 8192},
                   "mode": {"config": dict(llama), "to": "ggml", "mode": "neox"}},
            nullable=frozenset({"seq_len"})),
        "dialects.rope_layers": Manual(dialects.rope_layers, config_keys,
                                       {"config": dict(llama)}),
        "dialects.to_vllm": Manual(dialects.to_vllm, {"layer": "object"}, {"layer": layer}),
        "dialects.to_ggml": Manual(dialects.to_ggml, {"layer": "object", "mode": "string",
                                                     "n_ctx": "integer"},
                                   {"layer": layer, "mode": None, "n_ctx": None},
                                   nullable=frozenset({"mode", "n_ctx"})),
        "dialects.to_onnx": Manual(dialects.to_onnx, {"layer": "object",
                                                     "max_positions": "integer",
                                                     "seq_len": "integer"},
                                   {"layer": layer, "max_positions": 16, "seq_len": None},
                                   nullable=frozenset({"seq_len"})),
        "dialects.from_ggml": Manual(dialects.from_ggml, {"params": "object",
                                                         "head_dim": "integer"},
                                     {"params": yarn, "head_dim": 64},
                                     bases={"params": {"params": dict(ggml["all"]),
                                                       "head_dim": None}},
                                     nullable=frozenset({"head_dim"})),
        "dialects.from_vllm": Manual(dialects.from_vllm, {"kwargs": "object"},
                                     {"kwargs": dialects.translate(llama, "vllm")["all"]}),
        "dialects.freq_factors_summary": Manual(
            dialects.freq_factors_summary, {"factors": "array"},
            {"factors": [1.0, 2.0, 4.0]}, nullable=frozenset({"factors"})),
    }
    return {name: m.target(name) for name, m in manuals.items()}


def spec_targets() -> dict[str, Target]:
    from posenc.encodings import public_functions

    out = {}
    for name, call in public_functions().items():
        spec = spec_for_function(name)
        if spec is not None:
            out[name] = spec_target(name, call, spec)
    return out
