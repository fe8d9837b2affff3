"""Pairing and axis order are conventions the harness converts, not scopes.

A rotary implementation fixed at one pairing (interleaved ``(2i, 2i+1)``: RoFormer, GPT-J,
Meta's Llama, torchtune, mistral-inference's Pixtral; half ``(i, i + r/2)``: GPT-NeoX,
transformers) computes the other pairing exactly once its rotary features are permuted on
the way in and back on the way out:
``rope(x, layout="half") == H · rope_interleaved(H⁻¹ · x)``, ``H`` the static gather from
interleaved into half order over the rotary width (partial rotary included), as
:func:`posenc.encodings.qk_permutation.qk_permutation_indices` computes it.
:func:`declare_pairing` wraps an adapter so that every case and property of an encoding with
a pairing parameter (``layout``; ggml_rope's ``normal``/``neox`` modes) runs on it: calls in
its own pairing directly, the others through the permutation, which each result records
(``pairing`` in its details).

A sinusoidal table's column layout (interleaved, concat, t2t) is converted the same way by
:mod:`posenc.backends.sinusoidal_layouts`; :func:`declare_pairing` and :func:`converting`
hand ``sinusoidal`` to it.

The same for the axis order of ``x``: :func:`declare_axes` hands an implementation written for
``[batch, seq, heads, dim]`` its input in that order and transposes its output back.

Every layout is written as ``out_L · R_half · in_L`` (``in``/``out``: gathers into and out of
half order), so converting a call in layout ``C`` to an implementation in ``D`` gathers the
input by ``in_D⁻¹ · in_C`` and the output by ``out_C · out_D⁻¹``; MLA's ``deinterleave``
(interleaved in, half out) is one more row of the table.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from posenc import array_api
from posenc.catalog import specs
from posenc.encodings.qk_permutation import qk_permutation_indices
from posenc.encodings.rope_frequencies import schedule_type
from posenc.errors import ParameterError

from .adapter_base import Adapter, declare
from .sinusoidal_layouts import FUNCTION as SINUSOIDAL
from .sinusoidal_layouts import LAYOUTS as SINUSOIDAL_LAYOUTS
from .sinusoidal_layouts import LayoutConversion, declare_layout

PAIRINGS = ("half", "interleaved")
AXES = ("bhsd", "bshd")

# gathers (by the qk_permutation target they produce) per layout; None: identity
_IN = {"half": None, "interleaved": "half", "deinterleave": "half"}
_IN_INVERSE = {"half": None, "interleaved": "interleaved", "deinterleave": "interleaved"}
_OUT = {"half": None, "interleaved": "interleaved", "deinterleave": None}
_OUT_INVERSE = {"half": None, "interleaved": "half", "deinterleave": None}


def _partial_width(dim: int, params: Mapping[str, Any]) -> int:
    """rope's rotated width: rotary_dim, else int(dim * partial_rotary_factor) of a scaling dict
    (every feature for 'proportional'), else dim."""
    if params.get("rotary_dim") is not None:
        return int(params["rotary_dim"])
    scaling = params.get("scaling") or {}
    factor = scaling.get("partial_rotary_factor") if isinstance(scaling, Mapping) else None
    if factor is not None and schedule_type(scaling) != "proportional":
        return int(dim * factor)
    return dim


def _axial_width(dim: int, params: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]
                 ) -> int:
    if params.get("axes_dims") is not None:
        return int(sum(params["axes_dims"]))
    n_axes = shapes["positions"][-1] if shapes.get("positions") else 1
    return (dim // n_axes) * n_axes


@dataclass(frozen=True)
class Rotary:
    """Where an encoding's rotary features are: the inputs permuted on their last axis, the
    outputs permuted back (indices into a tuple result; None: the result itself), the width
    rotated (from the call's parameters and input shapes) and whether it is the first or the
    last ``width`` features of the axis."""

    inputs: tuple[str, ...]
    outputs: tuple[int, ...] | None
    width: Callable[[int, Mapping[str, Any], Mapping[str, tuple[int, ...]]], int]
    rope_slice: str = "first"
    # the parameter that says the pairing, and its values that are one (others: no pairing)
    parameter: str = "layout"
    values: Mapping[str, str] | None = None

    def pairing(self, value: Any) -> Any:
        return self.values.get(value, value) if self.values is not None else value

    def value(self, pairing: str) -> Any:
        if self.values is None:
            return pairing
        return next(v for v, p in self.values.items() if p == pairing)


ROTARY: dict[str, Rotary] = {
    "rope": Rotary(("x",), None, lambda d, p, s: _partial_width(d, p)),
    "xpos": Rotary(("x",), None, lambda d, p, s: _partial_width(d, p)),
    "mrope": Rotary(("x",), None, lambda d, p, s: _partial_width(d, {**p, "rotary_dim": None})),
    "axial_rope": Rotary(("x",), None, _axial_width),
    # the 2-D vision ropes rotate the whole head: transformers' Pixtral pairs (j, j + d/2),
    # mistral-inference's (2j, 2j+1); Llama 4's complex pairs are (2j, 2j+1)
    "pixtral_rope": Rotary(("x",), None, lambda d, p, s: d),
    "llama4_vision_rope": Rotary(("x",), None, lambda d, p, s: d),
    "dual_chunk_attention": Rotary(("q", "k"), (0, 1, 2, 3), lambda d, p, s: _partial_width(d, p)),
    "mla_rope": Rotary(("q", "k_rot"), (0, 1), lambda d, p, s: s["k_rot"][-1], "last"),
    # ggml: NORMAL pairs (2i, 2i+1), NEOX (i, i + n_dims/2); its other modes are not pairings
    "ggml_rope": Rotary(("x",), None, lambda d, p, s: int(p.get("n_dims") or d),
                        parameter="mode", values={"normal": "interleaved", "neox": "half"}),
}


def _spec_of(function: str) -> Any:
    return next(s for s in specs().values() if s.function == function)


def pairing_layouts(function: str) -> tuple[str, ...]:
    """The pairings of ``function``'s pairing parameter (``layout``; ggml's ``mode``) when
    posenc converts them, or the sinusoidal table's column layouts (empty otherwise)."""
    if function == SINUSOIDAL:
        return SINUSOIDAL_LAYOUTS
    if function not in ROTARY:
        return ()
    rotary = ROTARY[function]
    declared = _spec_of(function).parameters.get(rotary.parameter) or {}
    enum = tuple(rotary.pairing(v) for v in declared.get("enum", ()))
    return enum if set(PAIRINGS) <= set(enum) else ()


def pairing_parameter(function: str, pairing: str | None = None) -> tuple[str, Any]:
    """The parameter and value that say ``pairing`` to ``function`` (``("mode", "neox")``;
    ``("layout", None)`` for an encoding without one)."""
    rotary = ROTARY.get(function)
    if rotary is None:
        return "layout", pairing if function == SINUSOIDAL else None
    return rotary.parameter, rotary.value(pairing) if pairing is not None else None


@dataclass
class Conversion:
    """One adapter's declared pairing, and which call layouts went through the permutation
    since :meth:`take_log` was last called."""

    function: str
    layout: str
    converted: set[str] = field(default_factory=set)
    # read from the spec once: a call under a compiler (torch.compile) reads no files
    default_layout: str = field(init=False)
    inputs: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        spec = _spec_of(self.function)
        self.default_layout = str(self.rotary.pairing(spec.defaults().get(self.rotary.parameter)))
        self.inputs = tuple(i.name for i in spec.inputs)

    @property
    def rotary(self) -> Rotary:
        return ROTARY[self.function]

    def case_layout(self, params: Mapping[str, Any]) -> str:
        """The pairing a call asks for (another mode than a pairing as it is)."""
        if self.rotary.parameter not in params:
            return self.default_layout
        return str(self.rotary.pairing(params[self.rotary.parameter]))

    @property
    def own(self) -> dict[str, Any]:
        """The parameter that calls the implementation in its own pairing."""
        return {self.rotary.parameter: self.rotary.value(self.layout)}

    @property
    def own_view(self) -> str:
        """How a converted call looks to the implementation, for a failure's note."""
        return f"features permuted into its {self.layout} pairing, layout={self.layout!r}"

    def take_log(self) -> str | None:
        """How the calls since the last take ran, for a result's details (None: directly)."""
        seen, self.converted = sorted(self.converted), set()
        if not seen:
            return None
        return (f"layout={'/'.join(seen)} converted to the implementation's {self.layout} "
                "pairing (rotary features permuted in and back out)")

    # -- the gathers ------------------------------------------------------------------------
    def _indices(self, target: str | None, features: int, width: int) -> list[int] | None:
        if target is None:
            return None
        return qk_permutation_indices(features, n_heads=1, to=target, rotary_dim=width,
                                      rope_slice=self.rotary.rope_slice)

    def _gathers(self, targets: tuple[str | None, ...], features: int, width: int
                 ) -> list[list[int]]:
        return [i for i in (self._indices(t, features, width) for t in targets) if i is not None]

    def width(self, params: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]
              ) -> int | None:
        """The rotary width of a call that goes through the permutation, or None when it runs
        directly (its layout is the declared one, or its width is not one the permutation is
        defined for: the implementation then meets the call as it is)."""
        case = self.case_layout(params)
        first = self.rotary.inputs[0]
        if case == self.layout or case not in _IN or not shapes.get(first):
            return None
        try:
            width = int(self.rotary.width(int(shapes[first][-1]), params, shapes))
            for name in self.rotary.inputs:  # every gather is defined
                if name in shapes:
                    self._gathers(("half",), int(shapes[name][-1]), width)
        except (ParameterError, ValueError, TypeError, KeyError):
            return None
        return width

    def inputs_to_own(self, case: str, features: int, width: int) -> list[list[int]]:
        """in_D⁻¹ · in_C: a call's input into the implementation's pairing."""
        return self._gathers((_IN[case], _IN_INVERSE[self.layout]), features, width)

    def outputs_to_case(self, case: str, features: int, width: int) -> list[list[int]]:
        """out_C · out_D⁻¹: the implementation's result back into the call's layout."""
        return self._gathers((_OUT_INVERSE[self.layout], _OUT[case]), features, width)

    def outputs_to_own(self, case: str, features: int, width: int) -> list[list[int]]:
        """out_D · out_C⁻¹: a result in the call's layout seen in the implementation's."""
        return self._gathers((_OUT_INVERSE[case], _OUT[self.layout]), features, width)

    # -- the wrapped call -------------------------------------------------------------------
    def wrap(self, call: Callable[..., Any]) -> Callable[..., Any]:
        inputs = self.inputs

        def converted(*positional: Any, **values: Any) -> Any:
            values = {**dict(zip(inputs, positional, strict=False)), **values}
            shapes = {n: tuple(int(d) for d in values[n].shape) for n in inputs
                      if getattr(values.get(n), "shape", None) is not None}
            width = self.width({k: v for k, v in values.items() if k not in inputs}, shapes)
            if width is None:
                return call(**values)
            case = self.case_layout(values)
            self.converted.add(case)
            for name in self.rotary.inputs:
                if name in shapes:
                    values[name] = _gather_all(values[name], self.inputs_to_own(
                        case, shapes[name][-1], width))
            result = call(**{**values, **self.own})
            return self._back(result, case, width)

        return converted

    def _back(self, result: Any, case: str, width: int) -> Any:
        def back(value: Any) -> Any:
            if getattr(value, "shape", None) is None or len(tuple(value.shape)) == 0:
                return value  # the result check names what came back
            return _gather_all(value, self.outputs_to_case(case, int(value.shape[-1]), width))

        if self.rotary.outputs is None:
            return back(result)
        if not isinstance(result, tuple | list):
            return result
        parts = list(result)
        for i in self.rotary.outputs:
            if i < len(parts):
                parts[i] = back(parts[i])
        return tuple(parts) if isinstance(result, tuple) else parts

    # -- the same on NumPy, for naming a bug in the implementation's own pairing --------------
    def in_own_pairing(self, params: Mapping[str, Any], inputs: Mapping[str, Any],
                       output: np.ndarray) -> tuple[dict[str, Any], dict[str, Any],
                                                    Callable[[np.ndarray], np.ndarray]] | None:
        """A call seen from the implementation: the parameters with its layout, the inputs
        permuted into its pairing, and the map of a result in the call's layout into its
        pairing (None when the call ran directly, or for tuple results)."""
        if self.rotary.outputs is not None:
            return None
        shapes = {n: tuple(np.shape(v)) for n, v in inputs.items() if v is not None}
        width = self.width(params, shapes)
        if width is None:
            return None
        case = self.case_layout(params)
        own = {n: (_np_gather(v, self.inputs_to_own(case, np.shape(v)[-1], width))
                   if n in self.rotary.inputs and v is not None else v)
               for n, v in inputs.items()}
        back = self.outputs_to_own(case, int(np.shape(output)[-1]), width)
        return {**params, **self.own}, own, lambda out: _np_gather(out, back)


def _gather_all(value: Any, gathers: list[list[int]]) -> Any:
    for index in gathers:
        xp = array_api.namespace(value=value)
        # feature indices fit int32, which every framework holds (JAX without 64-bit mode too)
        idx = array_api.asarray(xp, index, dtype=xp.int32, device=array_api.device_of(value))
        value = xp.take(value, idx, axis=value.ndim - 1)
    return value


def _np_gather(value: np.ndarray, gathers: list[list[int]]) -> np.ndarray:
    for index in gathers:
        value = np.take(value, index, axis=-1)
    return value


def _require_layout(function: str, layout: str) -> None:
    layouts = pairing_layouts(function)
    if not layouts:
        raise ParameterError(f"layout={layout!r}: {function} has no pairing to convert "
                             f"(the encodings that do: {', '.join([*ROTARY, SINUSOIDAL])})")
    if function == SINUSOIDAL and layout not in layouts:
        raise ParameterError(f"layout={layout!r}: a sinusoidal layout is one of "
                             f"{', '.join(layouts)}")
    if function != SINUSOIDAL and layout not in PAIRINGS:
        raise ParameterError(f"layout={layout!r}: a pairing is one of {', '.join(PAIRINGS)}")


def declare_pairing(adapter: Adapter, layout: str) -> Adapter:
    """``adapter`` (an implementation fixed at pairing ``layout``) checked on every layout of its
    encoding: calls in another layout reach it with their rotary features permuted into
    ``layout`` (and ``layout=layout``) and its result permuted back (a sinusoidal table: its
    columns gathered, :mod:`posenc.backends.sinusoidal_layouts`). Its scope is asked with
    the layout it will be called with."""
    _require_layout(adapter.function, layout)
    if adapter.function == SINUSOIDAL:
        return declare_layout(adapter, layout, _spec_of(adapter.function).defaults())
    conversion = Conversion(adapter.function, layout)
    inner, inner_scope = adapter.call, adapter.scope

    def scope(params: dict[str, Any]) -> str | None:
        if inner_scope is None:
            return None
        if conversion.case_layout(params) in _IN:
            params = {**params, **conversion.own}
        return inner_scope(params)

    wrapped = declare(conversion.wrap(inner), inner, pairing=conversion)
    return dataclasses.replace(adapter, call=wrapped, scope=scope)


def conversion_of(backend: Any, function: str) -> Conversion | LayoutConversion | None:
    """The pairing conversion of ``backend``'s override of ``function`` (None: none)."""
    override = (getattr(backend, "overrides", None) or {}).get(function)
    return getattr(override, "posenc_pairing", None)


def declare_axes(adapter: Adapter, axes: str) -> Adapter:
    """``adapter`` taking ``x`` as ``[batch, seq, heads, dim]`` (``axes="bshd"``): posenc's
    ``[..., seq, dim]`` is handed over as ``[lead0, seq, prod(other leads), dim]`` and the
    result transposed back (``"bhsd"``: as posenc's own order, nothing to do)."""
    if axes not in AXES:
        raise ParameterError(f"axes={axes!r}: expected one of {', '.join(AXES)}")
    if axes == "bhsd":
        return adapter
    if adapter.function not in ROTARY or ROTARY[adapter.function].outputs is not None:
        raise ParameterError(f"axes={axes!r}: converted for x of rope, xpos, mrope and "
                             f"axial_rope, not {adapter.function}")
    inner = adapter.call
    names = [i.name for i in _spec_of(adapter.function).inputs]

    def call(*positional: Any, **values: Any) -> Any:
        values = {**dict(zip(names, positional, strict=False)), **values}
        x = values["x"]
        xp = array_api.namespace(x=x)
        shape = tuple(int(n) for n in x.shape)
        lead = shape[:-2]
        x4 = xp.reshape(x, (lead[0] if lead else 1, math.prod(lead[1:]), *shape[-2:]))
        out = inner(**{**values, "x": xp.permute_dims(x4, (0, 2, 1, 3))})
        if not (hasattr(out, "shape") and len(tuple(out.shape)) == 4):
            return out  # the result check names what came back
        return xp.reshape(xp.permute_dims(out, (0, 2, 1, 3)), shape)

    return dataclasses.replace(adapter, call=declare(call, inner))


def own_pairing(function: str, layout: str | None, unsupported: Mapping[str, Any],
                takes_layout: bool, label: str) -> str | None:
    """The pairing an implementation of ``function`` is fixed at: ``layout`` when declared,
    else the spec's default when it takes no ``layout`` (None: it takes both, or the encoding
    has no pairing). A pairing declared and also scoped out is a ParameterError naming both."""
    layouts = pairing_layouts(function)
    if not layouts and layout is None:
        return None
    parameter = pairing_parameter(function)[0]
    if layout is None:
        default = _spec_of(function).defaults().get(parameter)
        default = str(ROTARY[function].pairing(default) if function in ROTARY else default)
        if takes_layout or parameter in unsupported or default not in (
                layouts if function == SINUSOIDAL else PAIRINGS):
            return None  # MLA's default deinterleave is no pairing of its own to convert to
        return default
    if parameter in unsupported:
        values = unsupported[parameter]
        shown = ", ".join(f"{parameter}={v!r}" for v in (
            values if isinstance(values, list | tuple | set) else [values]))
        raise ParameterError(
            f"{label}: layout={layout!r} declares its pairing, and unsupported declares "
            f"{shown} out of its scope: a declared pairing is "
            "converted (every layout runs through the feature permutation), not scoped out; "
            "give layout= alone")
    _require_layout(function, layout)
    return layout


def converting(function: str, fn: Callable[..., Any], layout: str) -> Callable[..., Any]:
    """A Backend override with posenc's signature for ``function`` (``"rope"``, ...) that is
    fixed at pairing ``layout``: every call reaches it in ``layout``, the others through the
    feature permutation (``overrides={"rope": converting("rope", my_rope, "half")}``). The
    Backend's own ``scope`` is still asked with each call's own layout: leave layout out of it."""
    own_pairing(function, layout, {}, False, getattr(fn, "__name__", function))
    if function == SINUSOIDAL:
        sinusoidal = LayoutConversion(layout, _spec_of(function).defaults())
        return declare(sinusoidal.wrap(fn), pairing=sinusoidal)
    conversion = Conversion(function, layout)
    return declare(conversion.wrap(fn), pairing=conversion)
