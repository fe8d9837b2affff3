"""Complex order embeddings (Wang et al., ICLR 2020): ``r * exp(i (omega * k + phi))``."""

from __future__ import annotations

from typing import Any

from .. import array_api, params, validation
from ..errors import ParameterError

__all__ = ["complex_order"]

OUTPUTS = ("complex", "real_imag")

_SAME_SHAPE = ("amplitude, frequency and phase must share one shape [..., seq, dim] (at least 2 "
               "dims), got {shapes}")
_INPUTS = validation.Inputs("complex_order", messages={
    "shape": _SAME_SHAPE, "dtypes": "{names} must share one dtype, got {distinct}"})


def complex_order(
    amplitude: Any, frequency: Any, phase: Any, positions: Any = None, *, output: str = "complex",
) -> Any:
    """The complex embedding of tokens with amplitude, frequency and phase vectors
    (``[..., seq, dim]`` each) at ``positions`` (``[seq]`` or ``[..., seq]``; None means
    ``arange(seq)``).

    ``output="complex"`` returns a complex64 array (complex128 for float64 inputs);
    ``output="real_imag"`` returns the pair ``(real, imag)`` in the inputs' dtype, for
    real-valued models and array libraries without complex dtypes. Angles ``omega * k + phi``
    and the trigonometry run in float32 (float64 for float64 inputs).
    """
    xp = array_api.namespace(positions=positions, amplitude=amplitude, frequency=frequency,
                       phase=phase)
    params.choice("output", output, OUTPUTS)
    named = {"amplitude": amplitude, "frequency": frequency, "phase": phase}
    _INPUTS.check(xp, **named)  # positions: a list is converted below
    shapes = {name: tuple(a.shape) for name, a in named.items()}
    if len(set(shapes.values())) > 1:  # the leading dims too, which patterns leave free
        raise ParameterError(_SAME_SHAPE.format(
            shapes=", ".join(f"{n} {s}" for n, s in shapes.items())))
    if output == "complex" and not hasattr(xp, "complex64"):
        raise ParameterError(
            f"output='complex' needs complex dtypes, which {getattr(xp, '__name__', xp)!r} lacks: "
            "pass output='real_imag' for the (real, imag) pair")
    device = array_api.device_of(amplitude)
    token_shape = tuple(amplitude.shape[:-1])
    if positions is None:
        seq = token_shape[-1]
        positions = xp.arange(seq, device=device) if device is not None else xp.arange(seq)
    else:
        if not hasattr(positions, "dtype"):
            positions = array_api.asarray(xp, positions, device=device)
        pshape = tuple(positions.shape)
        if pshape != token_shape[-1:] and pshape != token_shape:
            raise ParameterError(
                f"positions has shape {pshape} but amplitude has shape {shapes['amplitude']}: "
                f"positions must be [seq] = {list(token_shape[-1:])} or [..., seq] = "
                f"{list(token_shape)}")
        array_api.check_positions_dtype(xp, positions)
    compute = array_api.compute_dtype(xp, amplitude.dtype)
    array_api.assert_position_range(xp, positions, compute=compute)

    r, w, p = (xp.astype(a, compute, copy=False) for a in (amplitude, frequency, phase))
    angles = w * xp.astype(positions, compute)[..., None] + p
    real, imag = r * xp.cos(angles), r * xp.sin(angles)
    if output == "real_imag":
        return (xp.astype(real, amplitude.dtype, copy=False),
                xp.astype(imag, amplitude.dtype, copy=False))
    cdtype = xp.complex128 if compute == xp.float64 else xp.complex64
    unit = array_api.asarray(xp, 1j, dtype=cdtype, device=device)
    return xp.astype(real, cdtype) + xp.astype(imag, cdtype) * unit
