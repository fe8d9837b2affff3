"""Everything rotary, in one place: the rotation machinery the rotary encodings share.

:mod:`.rotation` computes exact-position phases and rotates feature pairs (its names are
re-exported here, as ``posenc.rotary`` has always offered them); :mod:`.schedules` holds the
published RoPE frequency schedules in NumPy float64 (reference code, the goldens' source);
:mod:`.mrope_orderings` maps M-RoPE sections to position-id rows; :mod:`.vision` rotates by
2-D grid coordinates for the vision variants.
"""

from .rotation import (
    LAYOUTS,
    apply,
    apply_cos_sin,
    array_inputs,
    check_shapes,
    cos_sin,
    cos_sin_table,
    head_width,
    limb_phases,
    phases,
    rotary_width,
    rotate,
    schedule_tables,
    scheduled_phases,
    signed_frequencies,
    turn_limbs,
    widen,
)

__all__ = ["LAYOUTS", "apply", "apply_cos_sin", "array_inputs", "check_shapes", "cos_sin",
           "cos_sin_table", "head_width", "limb_phases", "phases", "rotary_width", "rotate",
           "schedule_tables", "scheduled_phases", "signed_frequencies", "turn_limbs", "widen"]
