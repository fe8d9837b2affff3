"""How much of the full plan a run takes: the ``standard`` tier (the default) and ``exhaustive``.

The full plan checks every golden case and property in every backend × dtype × mode ×
encoding group, 25 Hypothesis examples per property: about 20,000 checks, hours on 2 cores,
most of it compiling (each compiled case is a fresh ``torch.compile`` / ``jax.jit`` / XLA
graph) and JAX eager (each new shape compiles every primitive again).

``standard`` keeps every group (no backend × dtype × mode × encoding goes unchecked) and keeps
whole the groups that catch porting bugs: in eager mode, float64 and float32 groups of the
array backends (NumPy, array-api-strict, PyTorch, TensorFlow) run every case and every
property, and eager float32 of the PyTorch and Keras layer backends too (the mutant suites
in ``tests/`` plant their bugs there, so the known mutants are caught alike). Elsewhere each
group pays for itself in compilations, so it runs the spec's first case (specs list their
most telling case first):

- eager 16-bit groups of the array backends: every case (cheap), no properties (the cases
  carry the rounding: goldens are compared in the dtype under test);
- compiled groups (``torch.compile``, ``jax.jit``, ``tf.function``; every golden case is a
  fresh compilation), JAX eager (every new shape compiles each primitive again) and the other
  layer groups: the first case;
- every gradient check (float64 eager, one per spec);
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
    family = check.backend.split("-")[0]
    eager, wide = check.mode == "eager", check.dtype in ("float64", "float32")
    if eager and family != "jax":
        if _is_layer(check.backend):
            if check.dtype == "float32":
                return True
        elif wide:
            return True
        elif check.kind == "case":  # 16-bit array groups: every case
            return True
    return check.kind == "case" and case_index < 1


def select(checks: Sequence[Any], case_order: dict[str, list[str]]) -> list[Any]:
    """The standard tier of ``checks`` (``case_order``: spec id -> its case names in order)."""
    positions = {spec: {name: i for i, name in enumerate(names)}
                 for spec, names in case_order.items()}
    return [c for c in checks
            if keeps(c, positions.get(c.encoding, {}).get(c.name, -1) if c.kind == "case"
                     else -1)]
