"""Known porting bugs a spec declares (``diagnoses:``), evaluated with the NumPy reference.

A diagnosis is what the reference computes with some parameters overridden (``params:``)
and/or through a named transform (``transform:``): inputs shifted or negated, an output
reordered, or a variant of the computation (angles rounded to bfloat16, a float32 logarithm).
The conformance harness compares a failing output with each of them to name the likely bug;
this package only says what each diagnosis evaluates to.

The types, the registry and the helpers live in :mod:`.base`; the transforms live beside their
encoding, one module per encoding or family (``rope``, ``t5``, ``alibi``...; ``generic`` for
those any encoding may use), each calling :func:`register` when imported. Modules are
discovered, so a new encoding's transforms go in a new ``posenc/diagnoses/<id>.py`` and
nothing else changes.
"""

from .base import (
    Arrays,
    Diagnosis,
    Reference,
    Transform,
    call,
    evaluate,
    fitted,
    log_float32,
    parse,
    positions,
    register,
    round_significand,
    transforms,
)

__all__ = ["Arrays", "Diagnosis", "Reference", "Transform", "call", "evaluate", "fitted",
           "log_float32", "parse", "positions", "register", "round_significand", "transforms"]
