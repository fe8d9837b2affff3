"""FLOATER (Liu et al., ICML 2020): positions as samples of a neural ODE ``dp/dt = h(p, t)``."""

from __future__ import annotations

from typing import Any

from .. import array_api, params, validation
from ..errors import ParameterError
from ..layers import ZEROS, Layer, Weight, normal

__all__ = ["floater"]

INPUTS = ("p0", "w1", "b1", "w2", "b2")

_P0_SHAPE = "p0 must have shape [d] with d >= 1, got shape {shape}"


def _w1_shape(fields: dict[str, Any]) -> str:
    """w1's first dim is d + 1, which a spec shape cannot say: the message names it."""
    p0 = fields["shape_of"]["p0"]
    return (f"w1 has shape {fields['shape']} but p0 has shape {p0}: w1 must be [d + 1, hidden] "
            f"= [{p0[0] + 1}, hidden] with hidden >= 1 (its last row multiplies the time t)")


def _later_shape(fields: dict[str, Any]) -> str:
    """b1, w2 or b2 off; w1 is reported first when it is off too (as [d + 1, hidden >= 1])."""
    p0, w1 = fields["shape_of"]["p0"], fields["shape_of"]["w1"]
    if w1[0] != p0[0] + 1 or w1[1] == 0:
        return _w1_shape({**fields, "shape": w1})
    return ("{name} has shape {shape} but p0 has shape {shape_of[p0]} and w1 has shape "
            "{shape_of[w1]}: {name} must be {expected}").format(**fields)


_INPUTS = validation.Inputs("floater", messages={
    "rank:p0": _P0_SHAPE, "shape:w1": _w1_shape, "shape": _later_shape,
    "dtypes": "{names} must have one dtype, but {is_listed}"})


def _check_inputs(xp: Any, arrays: dict[str, Any]) -> tuple[int, int]:
    sizes = _INPUTS.check(xp, **arrays)
    p0, w1 = tuple(arrays["p0"].shape), tuple(arrays["w1"].shape)
    d, hidden = sizes["d"], sizes["hidden"]
    if d == 0:
        raise ParameterError(_P0_SHAPE.format(shape=p0))
    if w1[0] != d + 1 or hidden == 0:
        raise ParameterError(_w1_shape({"shape": w1, "shape_of": {"p0": p0}}))
    return d, hidden


def floater(
    p0: Any, w1: Any, b1: Any, w2: Any, b2: Any, *, length: int, dt: float = 0.01,
    steps: int = 5,
) -> Any:
    """The ``[length, d]`` FLOATER table: row ``k`` is ``p(t_k)``, ``t_k = k * dt``, dtype of ``p0``.

    ``p(t)`` solves ``dp/dt = h(p, t)``, ``p(0) = p0`` (``[d]``), with the two-layer ReLU network
    ``h(p, t) = relu([p, t] @ w1 + b1) @ w2 + b2`` on row vectors: ``w1`` is ``[d + 1, hidden]``
    (its last row multiplies ``t``), ``b1`` ``[hidden]``, ``w2`` ``[hidden, d]``, ``b2``
    ``[d]``. ``torch.nn.Linear`` stores the transposes: ``w1 = linear1.weight.T``.

    The solver is the classic fourth-order Runge-Kutta method (stages at ``t``, ``t + s/2``,
    ``t + s/2``, ``t + s``; weights 1/6, 1/3, 1/3, 1/6) with ``steps`` equal steps of size
    ``s = dt / steps`` per interval (the paper's code: ``dt = 0.01``, ``steps = 5``). It is not
    torchdiffeq's ``method="rk4"``, which is Kutta's 3/8 rule.

    Integrating an ODE is sequential in ``t``: this is a static Python loop over the
    ``(length - 1) * steps`` RK4 steps, ``4 (length - 1) steps`` network evaluations, which
    unrolls under jax.jit / torch.compile / tf.function. Compilation time grows with the number
    of steps (torch.compile on CPU fuses the whole unrolled loop into one kernel, about a second
    per RK4 step): keep ``length * steps`` modest inside compiled code, or build the table
    eagerly. The table does not depend on the tokens: compute it once per forward pass and
    reuse it. Computed in float32 for bfloat16/float16/float32 inputs (float64 for float64) and
    cast back.
    """
    arrays = {"p0": p0, "w1": w1, "b1": b1, "w2": w2, "b2": b2}
    xp = array_api.namespace(**arrays)
    length = params.size("length", length, minimum=1)
    dt = params.positive("dt", dt)
    steps = params.width("steps", steps)
    d, hidden = _check_inputs(xp, arrays)
    dtype = p0.dtype
    compute = array_api.compute_dtype(xp, dtype)
    p0, w1, b1, w2, b2 = (xp.astype(a, compute, copy=False) for a in arrays.values())
    w1_p, w1_t = w1[:d, :], xp.reshape(w1[d, :], (1, hidden))
    b1, b2 = xp.reshape(b1, (1, hidden)), xp.reshape(b2, (1, d))

    def field(p: Any, t: float) -> Any:  # h(p, t) for a [1, d] row; t a static float
        z = xp.matmul(p, w1_p) + (w1_t * t + b1)
        return xp.matmul(xp.where(z > 0, z, xp.zeros_like(z)), w2) + b2

    s = dt / steps
    p = xp.reshape(p0, (1, d))
    rows = [p]
    n = 0  # RK4 steps taken; the time is n * s, computed on the host in float64
    # Static loop over the (length - 1) * steps RK4 steps: the ODE is sequential in t.
    for _ in range(length - 1):
        for _ in range(steps):
            t = n * s
            k1 = field(p, t)
            k2 = field(p + (s / 2) * k1, t + s / 2)
            k3 = field(p + (s / 2) * k2, t + s / 2)
            k4 = field(p + s * k3, t + s)
            p = p + (s / 6) * (k1 + 2 * k2 + 2 * k3 + k4)
            n += 1
        rows.append(p)
    table = xp.concat(rows, axis=0)
    if not array_api.is_traced(table) and not bool(xp.all(xp.isfinite(table))) and all(
            bool(xp.all(xp.isfinite(a))) for a in (p0, w1, b1, w2, b2)):
        raise ParameterError(f"dt={dt!r} (steps={steps}) makes the ODE overflow: the positions "
                             f"leave the range of {array_api.dtype_name(compute)} before "
                             f"position {length - 1}; take a smaller dt")
    return xp.astype(table, dtype, copy=False)


LAYERS = (Layer(
    "FloaterPositionEmbedding", "floater",
    weights=(Weight("p0", lambda c: (c["dim"],), normal(0.02)),
             Weight("w1", lambda c: (c["dim"] + 1, c["hidden"]), normal(0.1)),
             Weight("b1", lambda c: (c["hidden"],), ZEROS),
             Weight("w2", lambda c: (c["hidden"], c["dim"]), normal(0.1)),
             Weight("b2", lambda c: (c["dim"],), ZEROS)),
    sizes=("dim", "hidden"), size_defaults={"hidden": 32}, config=("dt", "steps"),
    doc="FLOATER's neural-ODE table: layer(length=L) -> [L, dim]"),)
