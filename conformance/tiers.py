"""How much of the full plan a run takes: the ``standard`` tier (the default) and ``exhaustive``.

The full plan checks every golden case and property in every backend × dtype × mode ×
encoding group, 25 Hypothesis examples per property: about 20,000 checks, hours on 2 cores,
most of it compiling (each compiled case is a fresh ``torch.compile`` / ``jax.jit`` / XLA
graph) and JAX eager (each new shape compiles every primitive again).

``standard`` keeps every group (no backend × dtype × mode × encoding goes unchecked) and keeps
whole the groups that catch porting bugs: in eager mode, float64 and float32 groups of the
array backends run every case and every property (the mutant suites in ``tests/`` run there,
so the known mutants are caught alike). Elsewhere it takes the spec's first cases (specs list
their most telling cases first):

- eager 16-bit groups: every case (they are cheap), no properties (the cases carry the
  rounding: goldens are compared in the dtype);
- JAX eager (slow per shape): the first 2 cases per dtype, and the gradient check; JAX's
  properties run under ``jax.jit``;
- compiled float32: the first 2 cases, plus the properties under ``jax.jit`` and
  ``tf.function`` (``torch.compile`` recompiles per Hypothesis shape: none);
- compiled in other dtypes, and every group of the layer backends beyond eager float32 (which
  runs whole): the first case, plus the float64 gradient check;
- 5 Hypothesis examples per property instead of 25.

``exhaustive`` is the full plan. Both are deterministic, so shards of either partition it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

TIERS = ("standard", "exhaustive")
STANDARD_MAX_EXAMPLES = 5
LAYER_BACKENDS = ("-layers",)  # suffix of the layer backends' names


def _is_layer(backend: str) -> bool:
    return backend.endswith(LAYER_BACKENDS)


def keeps(check: Any, case_index: int) -> bool:
    """Whether the standard tier keeps ``check`` (``case_index``: its position among the
    spec's golden cases; -1 for other kinds)."""
    if check.kind in ("capability", "gradient"):
        return True
    eager, wide = check.mode == "eager", check.dtype in ("float64", "float32")
    jax = check.backend.split("-")[0] == "jax"
    if _is_layer(check.backend):
        if eager and check.dtype == "float32" and not jax:
            return True
        return check.kind == "case" and case_index < 1
    if eager and wide and not jax:
        return True
    if check.kind == "case":
        if eager and jax:
            return case_index < 2
        if eager:
            return True
        return case_index < (2 if check.dtype == "float32" else 1)
    # properties outside eager float64/float32: under jax.jit / tf.function in float32
    return (not eager and check.dtype == "float32"
            and check.backend.split("-")[0] in ("jax", "tensorflow"))


def select(checks: Sequence[Any], case_order: dict[str, list[str]]) -> list[Any]:
    """The standard tier of ``checks`` (``case_order``: spec id -> its case names in order)."""
    positions = {spec: {name: i for i, name in enumerate(names)}
                 for spec, names in case_order.items()}
    return [c for c in checks
            if keeps(c, positions.get(c.encoding, {}).get(c.name, -1) if c.kind == "case"
                     else -1)]
