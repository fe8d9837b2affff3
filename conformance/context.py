"""What a check sees: one backend, dtype, device and mode, and a way to call the encoding."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from posenc import array_api
from posenc.backends.backend import Backend
from posenc.golden import output_array
from posenc.inputs import generate
from posenc.specs import Spec

from . import messages, scope
from .tolerances import Comparison, Tolerance, compare


class CheckFailure(AssertionError):
    """A check found the backend wrong; ``details`` carries the numbers for the report."""

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.details = details or {}


class Unsupported(Exception):
    """The backend lacks a capability the check needs (reported as 'unsupported')."""


class UpstreamFailure(Exception):
    """The framework itself is wrong on a control that involves no code under test, so the
    check cannot judge it here (reported as 'xfail', with the control's numbers)."""


def _scope_from_eager(compiled: Callable[..., Any], call: Callable[..., Any]
                      ) -> Callable[..., Any]:
    """``compiled``, except that when it raises, the eager ``call`` decides whether the
    arguments are out of the implementation's scope: a compiler wraps an implementation's
    ``NotImplementedError`` (``posenc.Unsupported``) raised while tracing in its own error,
    which would read as a compile failure. An eager refusal is re-raised (reported
    ``unsupported``); otherwise the compiled call's error stands."""

    def guarded(*arrays: Any) -> Any:
        try:
            return compiled(*arrays)
        except NotImplementedError:
            raise
        except Exception as failure:
            try:
                call(*arrays)
            except NotImplementedError:
                raise
            except Exception:
                pass
            raise failure from None

    return guarded


@dataclass
class Context:
    backend: Backend
    spec: Spec
    dtype: str
    mode: str  # "eager" or "compiled"
    device: str
    tol: Tolerance
    params: dict[str, Any] = field(default_factory=dict)  # property params (spec-declared)
    args: dict[str, Any] = field(default_factory=dict)  # property arguments
    max_examples: int = 25
    _compiled: dict[Any, Callable[..., Any]] = field(default_factory=dict)
    # the parameters and input shapes/dtypes of the last call, for failure messages
    last_call: tuple[dict[str, Any], dict[str, dict[str, Any]]] | None = None
    last_ints: dict[str, np.ndarray] = field(default_factory=dict)  # its integer inputs
    last_shape: tuple[int, ...] | None = None  # the shape of the last result
    # the last call's NumPy inputs and its result (run() only), to diagnose a property failure
    last_inputs: dict[str, np.ndarray] = field(default_factory=dict)
    last_output: np.ndarray | None = None
    _index_dtype: str | None = None

    @property
    def index_dtype(self) -> str:
        """The integer dtype the harness feeds and expects back: the backend's, as held under
        the settings in force (int32 in JAX without 64-bit mode, as its users run it)."""
        if self._index_dtype is None:
            self._index_dtype = self.backend.held_as(self.backend.index_dtype, self.device)
        return self._index_dtype

    # -- inputs -------------------------------------------------------------------------
    def draw_positions(self, rng: np.random.Generator, lo: int, hi: int, size: int) -> np.ndarray:
        """``size`` positions in ``[lo, hi]``: independent draws, or a contiguous run
        ``p0 + arange(size)`` for an implementation that takes positions as an offset (past
        ``hi`` by up to ``size - 1`` where the range is shorter than the run)."""
        declared = scope.conventions(self.backend, self.spec.function) or ""
        if self.negative_positions_refused() and hi >= size - 1:
            lo = max(lo, 0)
        if "offset" in declared:  # a range shorter than the run: the run starts at lo
            return int(rng.integers(lo, max(lo, hi - size + 1) + 1)) + np.arange(size)
        return rng.integers(lo, hi + 1, size=size)

    def negative_positions_refused(self) -> bool:
        """Whether the implementation takes positions as an offset that may not be negative."""
        return "non-negative" in (scope.conventions(self.backend, self.spec.function) or "")

    def rescaled_by_conversion(self) -> bool:
        """Whether the implementation's results reach the check through a conversion that
        rescales them (an xPos centre): bit-identities are not observable through it."""
        return "xPos centre" in (scope.conventions(self.backend, self.spec.function) or "")

    @staticmethod
    def normal(shape: tuple[int, ...], seed: int) -> np.ndarray:
        """Quantised standard normals: exact in every float dtype under test."""
        return generate({"normal": {"shape": list(shape), "seed": seed}}, "float")

    # -- calling the encoding ----------------------------------------------------------------
    def _convert(self, name: str, value: np.ndarray) -> Any:
        kind = next(i.kind for i in self.spec.inputs if i.name == name)
        value = np.asarray(value)
        if kind == "float":
            return self.backend.from_numpy(value.astype(np.float64), self.dtype, self.device)
        if kind == "bool":
            return self.backend.from_numpy(value.astype(bool), "bool", self.device)
        held = np.iinfo(self.index_dtype) if self.index_dtype.startswith("int") else None
        if held is not None and value.size and (value.max() > held.max or value.min() < held.min):
            raise Unsupported(  # posenc's input limit: fed wrapped, they would blame the code
                f"{name} up to {int(np.abs(value).max())} do not fit {self.index_dtype}, the "
                f"integer dtype {self.backend.name} holds under these settings (JAX without "
                "64-bit mode): posenc cannot feed them here")
        return self.backend.from_numpy(value.astype(np.int64), self.backend.index_dtype,
                                       self.device)

    def _callable(self, names: tuple[str, ...], params: dict[str, Any]) -> Callable[..., Any]:
        fn = self.backend.function(self.spec.function)
        if self.spec.dtype_parameter:
            params = {**params, "dtype": self.backend.dtype(self.dtype)}
            # functions without array inputs are placed by device= (those with inputs follow
            # them, unless they declare device= themselves)
            if self.device != "cpu" and (not names or _declares(fn, "device")):
                params["device"] = self.backend.device_object(self.device)

        if self.backend.bind is not None:  # through the framework's layer API
            key = ("layer", names, tuple(sorted((k, repr(v)) for k, v in params.items())))
            if key not in self._compiled:
                self._compiled[key] = self.backend.bind(self.spec.function, names, params,
                                                        self.mode == "compiled")
            return self._compiled[key]

        def call(*arrays: Any) -> Any:
            return fn(**dict(zip(names, arrays, strict=True)), **params)

        if self.mode == "eager":
            return call
        key = (names, tuple(sorted((k, repr(v)) for k, v in params.items())))
        if key not in self._compiled:
            if self.backend.compile is None:
                raise Unsupported(f"backend {self.backend.name!r} has no compiled mode")
            self._compiled[key] = _scope_from_eager(self.backend.compile(call), call)
        return self._compiled[key]

    def raw(self, inputs: dict[str, np.ndarray | None], **params: Any) -> Any:
        """Call the encoding with NumPy inputs converted; returns the backend's own array."""
        present = tuple(k for k, v in inputs.items() if v is not None)
        params = {**self.params, **params}
        self.last_call = (params, messages.inputs(
            {k: inputs[k] for k in present}, {k: self._dtype_of(k) for k in present}))
        self.last_ints = {k: np.asarray(inputs[k]) for k in present
                          if self._dtype_of(k) == self.index_dtype}
        self.last_shape = None
        self.last_inputs = {k: np.asarray(inputs[k]) for k in present}
        self.last_output = None
        reason = scope.out_of_scope(self.backend, self.spec.function, params)
        if reason:
            raise Unsupported(f"out of {self.backend.name}'s declared scope: {reason}")
        arrays = [self._convert(k, inputs[k]) for k in present]
        return self._callable(present, params)(*arrays)

    def _dtype_of(self, name: str) -> str:
        kind = next(i.kind for i in self.spec.inputs if i.name == name)
        return {"float": self.dtype, "bool": "bool"}.get(kind, self.index_dtype)

    def run(self, inputs: dict[str, np.ndarray | None], **params: Any) -> np.ndarray:
        """Call the encoding and return its result as float64 NumPy (complex128 for complex
        results; a tuple stacked on a new leading axis), after checking that it is made of
        arrays of this backend, of the dtype under test."""
        out = self.to_numpy(self.raw(inputs, **params))
        self.last_shape, self.last_output = out.shape, out
        return out

    def to_numpy(self, out: Any) -> np.ndarray:
        """A backend result as NumPy, checked by :meth:`check_array` (tuples part by part)."""
        if isinstance(out, tuple | list):
            for part in out:
                if isinstance(part, int | float) or getattr(part, "ndim", None) == 0:
                    continue  # a scalar factor (a Python float; 0-d once jit has traced it)
                self.check_array(part)
            return output_array([part if isinstance(part, int | float)
                                 else self.backend.to_numpy(part) for part in out])
        self.check_array(out)
        return output_array(self.backend.to_numpy(out))

    def require_complex(self) -> None:
        """Raise :class:`Unsupported` when the backend has no complex dtypes."""
        if not hasattr(self.backend.namespace(), "complex64"):
            raise Unsupported(f"backend {self.backend.name!r} has no complex dtypes")

    @property
    def complex_dtype(self) -> str:
        """The complex dtype of results computed for the dtype under test (float32 parts below
        float64: no framework has bfloat16 complex numbers)."""
        return "complex128" if self.dtype == "float64" else "complex64"

    def check_array(self, out: Any) -> None:
        if not hasattr(out, "dtype") or not hasattr(out, "shape"):
            raise CheckFailure(f"returned {type(out).__name__}, not an array")
        got = array_api.dtype_name(out.dtype)
        if self.spec.output_kind == "int":
            if got != self.index_dtype:
                raise CheckFailure(f"returned dtype {got}, expected {self.index_dtype} "
                                   "(the integer dtype of the inputs)")
            return
        expected = self.complex_dtype if got.startswith("complex") else self.dtype
        if got != expected:
            raise CheckFailure(f"returned dtype {got}, expected {expected} (the dtype under test)")

    # -- assertions ---------------------------------------------------------------------------
    def assert_close(self, actual: np.ndarray, expected: np.ndarray, what: str, *,
                     scale: float | None = None, angle_bound: float = 0.0,
                     tol: Tolerance | None = None, bound: Any = None) -> Comparison:
        """``bound``: a per-element bound (:mod:`.rotary_bound`) in place of the case-wide
        angle term."""
        tol = tol or self.tol
        if scale is None:
            scale = float(np.max(np.abs(expected), initial=0.0)) or 1.0
        result = compare(actual, expected, tol, scale=scale, angle_bound=angle_bound,
                         bound=bound)
        if not result.ok:
            raise CheckFailure(f"{what}: {result.message}", result.details())
        if not result.judgeable:  # within a tolerance that tells nothing apart: no pass
            raise CheckFailure(f"{what}: {result.unjudged_note()}; {result.message}",
                               result.details())
        return result

    def assert_equal(self, actual: np.ndarray, expected: np.ndarray, what: str) -> None:
        actual, expected = np.asarray(actual), np.asarray(expected)
        if actual.shape != expected.shape:
            raise CheckFailure(f"{what}: shape {actual.shape} != {expected.shape}")
        diff = ~((actual == expected) | (np.isnan(actual) & np.isnan(expected)))
        if diff.any():
            worst = tuple(int(i) for i in np.argwhere(diff)[0])
            raise CheckFailure(
                f"{what}: not bit-identical: {int(diff.sum())} elements differ, first at index "
                f"{worst}: got {messages.number(actual[worst])}, expected "
                f"{messages.number(expected[worst])}",
                {"worst_index": list(worst), "max_abs": float(np.nanmax(np.abs(actual - expected)))})

    def given(self, **strategies: Any) -> Callable[[Callable[..., None]], None]:
        """Run the decorated function now, as a derandomised Hypothesis test."""
        from hypothesis import HealthCheck, Phase, given, settings

        def decorator(fn: Callable[..., None]) -> None:
            out_of_scope: list[BaseException] = []

            # an example outside the implementation's scope ends the property as unsupported,
            # without Hypothesis shrinking it as a failure
            @functools.wraps(fn)
            def example(*args: Any, **kwargs: Any) -> None:
                if out_of_scope:
                    return
                try:
                    fn(*args, **kwargs)
                except (Unsupported, NotImplementedError) as exc:
                    out_of_scope.append(exc)

            # compiled: no shrinking, which would compile a new graph for every smaller example
            # it tries (minutes on a failing property); the first failing example is reported.
            # Never the explain phase: it reruns a shrunk failure hundreds of times to annotate
            # which arguments did not matter (9 of 10 s of a failing rope property)
            phases = [p for p in Phase if p is not Phase.explain
                      and (p is not Phase.shrink or self.mode != "compiled")]
            test = settings(max_examples=self.max_examples, derandomize=True, database=None,
                            deadline=None, print_blob=False, phases=phases,
                            suppress_health_check=list(HealthCheck))(given(**strategies)(example))
            _seed_once(test, example)
            test()
            if out_of_scope:
                raise out_of_scope[0]

        return decorator


_DIGESTS: dict[tuple[Any, str], bytes] = {}


def _seed_once(test: Any, example: Callable[..., None]) -> None:
    """The seed derandomize=True would draw for ``example`` (its source's digest), read once per
    property body and reused: Hypothesis re-reads and re-tokenises the source on every run, twice
    (a fifth of an eager property check's CPU). The same digest, so the same examples."""
    from hypothesis import seed
    try:  # Hypothesis's own digest (internal): without it, Hypothesis computes it as before
        from hypothesis.internal.reflection import function_digest
    except ImportError:
        return
    body = inspect.unwrap(example)
    key = (body.__code__, repr(inspect.signature(example)))
    if key not in _DIGESTS:
        _DIGESTS[key] = function_digest(example)
    seed(int.from_bytes(_DIGESTS[key], "big"))(test)  # as Hypothesis's int_from_bytes
    # the database key Hypothesis would compute again from the source (no database: unused)
    test._hypothesis_internal_database_key = _DIGESTS[key]


def _declares(fn: Any, name: str) -> bool:
    """Whether ``fn``'s signature names parameter ``name`` (False when it cannot be read)."""
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
