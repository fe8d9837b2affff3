"""A sinusoidal table's column layout is a convention the harness converts, not a scope.

Every layout of ``sinusoidal`` is a choice of columns from the same two families,
``sin(k·ω_i)`` and ``cos(k·ω_i)`` with ``ω_i = exp(-i·ln(base)/m)``, plus zero columns:

- interleaved (the paper, keras-hub): ``m = d/2``, ``ceil(d/2)`` frequencies, column ``2i`` the
  sine and ``2i + 1`` the cosine of ``ω_i``;
- concat (Marian/BART, open_clip's 1-D sincos): the same ``m`` and frequencies, the sines first,
  then ``floor(d/2)`` cosines;
- t2t (tensor2tensor, fairseq): ``m = max(floor(d/2) - 1, 1)``, ``floor(d/2)`` frequencies,
  ``[sin | cos]`` and a zero column for odd ``d``.

Interleaved and concat at the same width and base are one column permutation of each other.
t2t's ladder is not the others' at the same base, but it is the others' at another base and
width: ``ω_i`` depends on ``ln(base)/m`` alone, so a table in layout ``C`` comes out of an
implementation in layout ``D`` called at width ``2n`` (``n``: the frequencies ``C`` uses) and
base ``exp(m_D · ln(base)/m_C)``, its columns gathered by name (and zero columns added).
:func:`declare_layout` wraps an adapter fixed at one layout so that every case and property
runs on it, and each converted result says so (``pairing`` in its details).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from posenc import array_api

from .adapter_base import Adapter, declare

LAYOUTS = ("interleaved", "concat", "t2t")
FUNCTION = "sinusoidal"
POSITIONAL = ("positions", "dim")  # posenc.sinusoidal's positional arguments

Column = tuple[str, int] | None  # ("sin", i), ("cos", i), or a zero column


@dataclass(frozen=True)
class Table:
    """A layout at one width: its columns and the divisor ``m`` of ``ln(base)`` in its ladder."""

    columns: tuple[Column, ...]
    divisor: float

    @property
    def frequencies(self) -> int:
        return 1 + max((c[1] for c in self.columns if c is not None), default=-1)


def table(layout: str, dim: int) -> Table:
    """The columns of ``layout`` at width ``dim`` (the reference's definition, column by column)."""
    if layout == "t2t":
        half = dim // 2
        cols: list[Column] = [("sin", i) for i in range(half)] + [("cos", i) for i in range(half)]
        return Table(tuple(cols + [None] * (dim - 2 * half)), max(half - 1, 1))
    n = (dim + 1) // 2
    if layout == "interleaved":
        return Table(tuple(("sin" if c % 2 == 0 else "cos", c // 2) for c in range(dim)), dim / 2)
    return Table(tuple([("sin", i) for i in range(n)] + [("cos", i) for i in range(dim // 2)]),
                 dim / 2)


@dataclass(frozen=True)
class Plan:
    """How one call in another layout runs on the implementation: the width and base it is
    called with, and the column of its output that gives each column asked (None: zero)."""

    dim: int
    base: float
    gather: tuple[int | None, ...]


def plan(case: str, own: str, dim: int, base: float) -> Plan:
    """The call of an implementation fixed at ``own`` that gives ``case``'s table at ``dim``,
    ``base``: the same width and base when ``own``'s table there has every column (interleaved
    and concat), else width ``2n`` and the base with the same ladder."""
    want = table(case, dim)
    same = table(own, dim)
    if same.divisor == want.divisor and set(want.columns) - {None} <= set(same.columns):
        call_dim, call_base, got = dim, base, same
    else:
        n = want.frequencies
        call_dim = 2 * max(n, 1)
        got = table(own, call_dim)
        # one frequency is ω_0 = 1 at every base: keep the caller's
        call_base = base if n < 2 else math.exp(got.divisor * math.log(base) / want.divisor)
    where = {c: i for i, c in enumerate(got.columns) if c is not None}
    return Plan(call_dim, call_base, tuple(None if c is None else where[c] for c in want.columns))


@dataclass
class LayoutConversion:
    """One adapter's declared layout and the call layouts converted since :meth:`take_log`."""

    layout: str
    defaults: Mapping[str, Any]  # the spec's: what a call that leaves a parameter out asks
    converted: set[str] = field(default_factory=set)

    def case_layout(self, params: Mapping[str, Any]) -> str:
        return str(params.get("layout", self.defaults["layout"]))

    @property
    def own_view(self) -> str:
        """How a converted call looks to the implementation, for a failure's note."""
        return (f"its own {self.layout} columns at the width and base it was called with, "
                f"layout={self.layout!r}")

    def take_log(self) -> str | None:
        seen, self.converted = sorted(self.converted), set()
        if not seen:
            return None
        return (f"layout={'/'.join(seen)} converted to the implementation's {self.layout} "
                "columns (its table's columns gathered, its width and base mapped where the "
                "ladders differ)")

    def in_own_pairing(self, params: Mapping[str, Any], inputs: Mapping[str, Any],
                       output: np.ndarray) -> tuple[dict[str, Any], dict[str, Any],
                                                    Callable[[np.ndarray], np.ndarray]] | None:
        """A converted call seen from the implementation: the parameters it was called with,
        the inputs, and the map of a table in the call's layout onto the implementation's
        columns (None: the call ran directly, or the implementation's table has a column the
        call's lacks)."""
        own, how = self.call_params(params)
        if how is None:
            return None
        asked = table(self.case_layout(params), int(params["dim"])).columns
        got = table(self.layout, how.dim).columns
        if not set(got) <= set(asked) - {None}:
            return None
        back = [asked.index(c) for c in got]
        return own, dict(inputs), lambda out: np.take(out, back, axis=-1)

    def call_params(self, params: Mapping[str, Any]) -> tuple[dict[str, Any], Plan | None]:
        """The parameters the implementation is called with for a call's, and the plan that
        gathers the call's columns (None: it runs as it is: its own layout, or a width or
        base no table has, which the implementation meets itself)."""
        case = self.case_layout(params)
        dim, base = params.get("dim"), params.get("base", self.defaults["base"])
        if case == self.layout or case not in LAYOUTS or not _is_width(dim) or not (
                isinstance(base, int | float) and math.isfinite(base) and base > 1):
            return dict(params), None
        how = plan(case, self.layout, int(dim), float(base))
        return {**params, "dim": how.dim, "base": how.base, "layout": self.layout}, how

    def wrap(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def converted(*positional: Any, **values: Any) -> Any:
            asked = {**dict(zip(POSITIONAL, positional, strict=False)), **values}
            values, how = self.call_params(asked)
            if how is None:
                return call(**values)
            self.converted.add(self.case_layout(asked))
            return _gather_columns(call(**values), how)

        return converted


def _is_width(dim: Any) -> bool:
    return isinstance(dim, int) and not isinstance(dim, bool) and dim >= 1


def _gather_columns(out: Any, how: Plan) -> Any:
    if getattr(out, "shape", None) is None or len(tuple(out.shape)) == 0 or \
            int(out.shape[-1]) != how.dim:
        return out  # the result check names what came back
    gather = how.gather
    xp = array_api.namespace(value=out)
    device = array_api.device_of(out)
    kept = [g for g in gather if g is not None]
    idx = array_api.asarray(xp, kept, dtype=xp.int64, device=device)
    taken = xp.take(out, idx, axis=out.ndim - 1)
    zeros = len(gather) - len(kept)
    if not zeros:
        return taken
    # the only zero column is t2t's last one (odd width), so the kept columns come first
    pad = xp.zeros((*tuple(out.shape)[:-1], zeros), dtype=out.dtype, device=device)
    return xp.concat([taken, pad], axis=-1)


def declare_layout(adapter: Adapter, layout: str, defaults: Mapping[str, Any]) -> Adapter:
    """``adapter`` (a sinusoidal table fixed at ``layout``) checked on every layout: a call in
    another one reaches it at the width and base that give its columns, with
    ``layout=layout``, and its columns are gathered into the call's."""
    conversion = LayoutConversion(layout, dict(defaults))
    inner, inner_scope = adapter.call, adapter.scope

    def scope(params: dict[str, Any]) -> str | None:
        if inner_scope is None:
            return None
        return inner_scope(conversion.call_params(params)[0])

    wrapped = declare(conversion.wrap(inner), inner, pairing=conversion)
    return dataclasses.replace(adapter, call=wrapped, scope=scope)
