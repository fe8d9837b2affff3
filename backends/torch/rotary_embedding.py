"""``pe.RotaryEmbedding``: RoPE as a torch module, with cos/sin tables built once, q and k in
one pass (k may have fewer heads), and in-place or ``out=`` rotation."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from posenc import array_api, params, rotary
from posenc.encodings import learned
from posenc.encodings.rope import position_schedule, rope_cos_sin
from posenc.errors import ParameterError

from . import native as torch_native
from .inductor_rotation import rotate_compiled
from .memory import empty_for_writing, may_overlap, same_view
from .native import pair_views
from .qk_pair import check_pair
from .rotary_kernel_route import kernel_rotation
from .tiled import rotate_tiled

__all__ = ["RotaryEmbedding", "check_pair", "rotary_factory"]


class RotaryEmbedding(nn.Module):
    """RoPE as a module: ``x = rotary(x, positions)``, or ``q, k = rotary(q, positions, k=k)``.

    With ``head_dim`` and ``max_positions`` the cos/sin tables for positions
    ``[0, max_positions)`` are built once, in float32 from exact phases (attention factor
    included; LongRoPE keeps both tables and switches at run time), and follow ``.to(device)``;
    they stay float32 whatever dtype the module is cast to. Integer positions then read rows
    of the tables (a position outside them raises in eager mode and gives NaN under
    torch.compile, like ``posenc.learned``). Float64 inputs, float positions, ``dynamic`` scaling
    without ``seq_len``, or no table: cos/sin are computed per call, exactly as ``posenc.rope``.

    ``forward(x, positions=None, *, k=None, offset=None, inplace=False, out=None)``:
    ``positions`` ``[seq]`` or ``[batch, seq]``, or ``offset`` (an int or a 0-d integer tensor:
    a tensor never recompiles) for ``offset + arange(seq)``. With ``k`` the cos/sin rows are
    gathered once for both and ``(q, k)`` is returned; ``k`` may have fewer heads than ``x``.
    ``inplace=True`` overwrites x (and k), with no autograd through them; ``out=`` takes a tensor
    (or a ``(q_out, k_out)`` pair) of the same shape.
    """

    def __init__(self, head_dim: int | None = None, *, base: float = 10000.0,
                 layout: str = "half", rotary_dim: int | None = None,
                 scaling: Mapping[str, Any] | None = None, seq_len: int | None = None,
                 max_positions: int | None = None, device: Any = None) -> None:
        super().__init__()
        self.config = {"base": base, "layout": layout, "rotary_dim": rotary_dim,
                       "scaling": scaling, "seq_len": seq_len}
        params.choice("layout", layout, rotary.LAYOUTS)
        self.head_dim = None if head_dim is None else params.integer("head_dim", head_dim,
                                                                       minimum=2)
        self.max_positions = max_positions
        self._turns_by_device: dict[Any, torch.Tensor] = {}
        self._schedule = None if self.head_dim is None else position_schedule(
            self.head_dim, rotary_dim, base, scaling, seq_len)
        if max_positions is not None:
            if self._schedule is None:
                raise ParameterError(
                    f"max_positions={max_positions!r} needs head_dim (and seq_len for dynamic "
                    "scaling): the tables depend on them")
            if isinstance(max_positions, bool) or not isinstance(max_positions, int) \
                    or not 0 < max_positions <= array_api.FLOAT32_EXACT_INTEGERS:
                raise ParameterError(f"max_positions={max_positions!r} must be an int in "
                                     f"[1, 2**24]")
            params.bounded("max_positions", max_positions,
                           max_positions * 2 * self._schedule.rotary_dim,
                           what="the cos/sin table [max_positions, 2, rotary_dim]")
        self._build_tables(device)

    def _build_tables(self, device: Any) -> None:
        """``table`` (and ``table_long`` for LongRoPE): the core's float32
        ``[max_positions, 2, rotary_dim]`` tables (``posenc.rotary.schedule_tables``)."""
        tables = (None, None)
        if self.max_positions is not None:
            xp = array_api.namespace(x=torch.empty(0))
            tables = rotary.schedule_tables(xp, self._schedule, self.max_positions,
                                            layout=self._layout, device=device)
        for name, table in zip(("table", "table_long"), tables, strict=True):
            self.register_buffer(name, table, persistent=False)

    @property
    def cos(self) -> torch.Tensor | None:
        """cos of the table's rows, ``[max_positions, rotary_dim / 2]`` (a view)."""
        if self.table is None:
            return None
        return pair_views(self.table[:, 0], self._schedule.rotary_dim, self._layout)[0]

    @property
    def sin(self) -> torch.Tensor | None:
        """sin of the table's rows, ``[max_positions, rotary_dim / 2]`` (a view)."""
        if self.table is None:
            return None
        return pair_views(self.table[:, 1], self._schedule.rotary_dim, self._layout)[1]

    @property
    def _layout(self) -> str:
        return self.config["layout"]

    def _apply(self, fn: Any, recurse: bool = True) -> RotaryEmbedding:
        super()._apply(fn, recurse)
        if self.table is not None and self.table.dtype != torch.float32:  # .half() etc.
            self._build_tables(self.table.device)
        return self

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in
                         {"head_dim": self.head_dim, **self.config,
                          "max_positions": self.max_positions}.items() if v is not None)

    # -- cos and sin ---------------------------------------------------------------------
    def _positions(self, x: torch.Tensor, positions: Any, offset: Any) -> Any:
        if positions is not None:
            if offset is not None:
                raise ParameterError("give positions or offset, not both")
            return positions
        if offset is None:
            return None
        seq = operator.index(x.shape[-2])
        if isinstance(offset, torch.Tensor):
            if offset.ndim != 0 or offset.dtype.is_floating_point or offset.dtype == torch.bool:
                raise ParameterError(f"offset must be an int or a 0-d integer tensor, got a "
                                     f"{offset.dtype} tensor of shape {tuple(offset.shape)}")
            return torch.arange(seq, device=x.device) + offset.to(x.device)
        offset = params.integer("offset", offset)
        return torch.arange(offset, offset + seq, device=x.device)

    def _uses_table(self, x: torch.Tensor, positions: Any) -> bool:
        return (self.table is not None and x.dtype != torch.float64 and positions is not None
                and hasattr(positions, "dtype") and not positions.dtype.is_floating_point)

    def _cos_sin(self, xp: Any, x: torch.Tensor, positions: torch.Tensor) -> tuple[Any, Any]:
        """Full-width ``(cos, signed sin)`` rows for ``positions``, lined up with ``x``."""
        self._check_positions(xp, x, positions)
        rows = _gather(self.table, positions)
        if self.table_long is not None:
            long = torch.max(positions) + 1 > self._schedule.switch_length
            rows = torch.where(long, _gather(self.table_long, positions), rows)
        return self._lined_up(x, positions, *rows.unbind(-2))

    def _check_positions(self, xp: Any, x: torch.Tensor, positions: torch.Tensor) -> None:
        """``x`` and ``positions`` line up, ``x`` has this module's head width, and the
        positions have an integer or floating dtype (the checks of both per-call paths)."""
        dim = rotary.check_shapes(x, positions)[1]
        if dim != self.head_dim:
            raise ParameterError(f"x.shape[-1]={dim} but this RotaryEmbedding has "
                                 f"head_dim={self.head_dim}")
        array_api.check_positions_dtype(xp, positions)

    def _exact_full_width(self, xp: Any, x: torch.Tensor,
                          positions: Any) -> tuple[Any, Any] | None:
        """Full-width ``(cos, signed sin)`` ``[*positions.shape, rotary_dim]`` computed per call
        from exact phases, for the no-table eager path on CPU/CUDA; None where the general
        path runs (a table, float64, LongRoPE's switch, dynamic scaling, torch.compile).

        Angles are ``p * f`` in float64 turns with a signed, full-width frequency vector
        (``-f`` on a pair's first member): cos is even and sin odd, so one cos and one sin give
        the full-width cos and the signed sin the rotation ``x * cos + partner(x) * sin``
        takes — eight ops for what transformers does in ten, with exact phases."""
        sched = self._schedule
        if (self.table is not None or sched is None or sched.long_inv_freq is not None
                or x.dtype == torch.float64 or positions is None
                or not isinstance(positions, torch.Tensor) or array_api.is_traced(positions)
                or positions.device.type not in torch_native.FLOAT64_DEVICES):
            return None
        self._check_positions(xp, x, positions)
        array_api.assert_position_range(xp, positions, compute=torch.float32)
        angles = torch_native.phases_from_turns(positions[..., None],
                                                self._signed_turns(positions.device),
                                                torch.float32)
        return rotary.cos_sin(xp, angles, sched.attention_factor)

    def _signed_turns(self, device: Any) -> torch.Tensor:
        """The signed full-width frequencies in float64 turns on ``device``, made once per
        device: the per-call path then hashes no frequency tuple."""
        turns = self._turns_by_device.get(device)
        if turns is None:
            turns = torch_native.turns64(
                rotary.signed_frequencies(self._schedule.inv_freq, self._layout), device)
            self._turns_by_device[device] = turns
        return turns

    @staticmethod
    def _lined_up(x: torch.Tensor, positions: torch.Tensor, cos: Any, sin: Any) -> tuple[Any, Any]:
        if positions.ndim == 2:  # line batch up with x[b, ..., s, :]
            shape = (cos.shape[0], *([1] * (x.ndim - 3)), *cos.shape[1:])
            return cos.view(shape), sin.view(shape)
        return cos, sin

    # -- rotation ------------------------------------------------------------------------
    def forward(self, q: torch.Tensor, positions: Any = None, *, k: torch.Tensor | None = None,
                offset: Any = None, inplace: bool = False, out: Any = None) -> Any:
        xs = (q,) if k is None else (q, k)
        outs, direct = self._outputs(xs, out, inplace)
        positions = self._positions(q, positions, offset)
        if positions is None and self.table is not None:
            positions = torch.arange(operator.index(q.shape[-2]), device=q.device)
        xp = array_api.namespace(x=q, positions=positions, k=k)
        _, positions = rotary.array_inputs(xp, q, positions)
        if self.head_dim is not None and q.shape[-1] != self.head_dim:
            raise ParameterError(f"x.shape[-1]={q.shape[-1]} but this RotaryEmbedding has "
                                 f"head_dim={self.head_dim}")
        if k is not None:
            check_pair(q, k)
        kernel = kernel_rotation(q, k, positions, self.config, outs, direct, inplace)
        if kernel is not None:  # CUDA: the fused Triton kernel, q and k in one launch
            return kernel
        exact = self._exact_full_width(xp, q, positions)
        if exact is not None or self._uses_table(q, positions):
            # exact: eager, static schedule, full-width phases once for q and k; else the table
            cos, sin = (self._lined_up(q, positions, *exact) if exact is not None
                        else self._cos_sin(xp, q, positions))
            rd, layout = self._schedule.rotary_dim, self._layout
            if outs is None and _fills_new_tensors(xs, cos, sin):
                outs, direct = tuple(empty_for_writing(x.shape, x.dtype, x.device)
                                     for x in xs), True
            if outs is not None and direct:
                for x, target in zip(xs, outs, strict=True):
                    _rotate_into(x, target, cos, sin, rd, layout)
                return outs[0] if k is None else outs
            results = tuple(_rotate_full(x, cos, sin, rd, layout) for x in xs)
        else:  # one cos/sin for q and k
            cos, sin, rd = rope_cos_sin(q, positions, **self.config)
            layout = self.config["layout"]
            results = tuple(rotary.apply_cos_sin(xp, x, cos, sin, rotary_dim=rd, layout=layout)
                            for x in xs)
        if outs is None:
            return results[0] if k is None else results
        for target, value in zip(outs, results, strict=True):
            target.copy_(value)
        return outs[0] if k is None else outs

    @staticmethod
    def _outputs(xs: tuple[torch.Tensor, ...], out: Any, inplace: bool) -> tuple[Any, bool]:
        """``(targets, direct)``: the tensors the results go to (None: new tensors) and whether
        they can be rotated into one after the other (no target overlaps another input or
        target; otherwise the results are made first, then copied)."""
        if inplace and out is not None:
            raise ParameterError("give inplace=True or out=, not both")
        if inplace:
            if len(xs) == 2 and same_view(*xs):
                raise ParameterError("inplace=True with k the same memory as q: it would be "
                                     "rotated twice; pass k=None")
            return xs, not (len(xs) == 2 and may_overlap(*xs))
        if out is None:
            return None, True
        outs = (out,) if isinstance(out, torch.Tensor) else tuple(out)
        if len(outs) != len(xs):
            raise ParameterError(f"out has {len(outs)} tensors for {len(xs)} inputs")
        for i, (x, o) in enumerate(zip(xs, outs, strict=True)):
            if o.shape != x.shape or o.dtype != x.dtype or o.device != x.device:
                raise ParameterError(
                    f"out[{i}] is {o.dtype} {tuple(o.shape)} on {o.device}, expected "
                    f"{x.dtype} {tuple(x.shape)} on {x.device}")
        if len(outs) == 2 and same_view(*outs):
            raise ParameterError("out[0] and out[1] are the same memory")
        # an output that is its own input is rotated in place
        outs = tuple(x if same_view(o, x) else o for x, o in zip(xs, outs, strict=True))
        n = len(xs)
        direct = not any(may_overlap(outs[i], t) for i in range(n) for t in (
            *(xs[j] for j in range(n) if j != i), *(outs[j] for j in range(n) if j != i),
            *([] if outs[i] is xs[i] else [xs[i]])))
        return outs, direct


# From this many elements on, new results are filled tile by tile (backends/torch/tiled.py)
# rather than made by x·cos + partner(x)·sin; below it the three ops' lower dispatch cost
# wins (a decode step)
_FILL_FROM = 1 << 16


def _fills_new_tensors(xs: tuple[torch.Tensor, ...], cos: torch.Tensor,
                       sin: torch.Tensor) -> bool:
    """Whether results may be written tile by tile into new tensors: eager and large, with
    the out= ops allowed (no autograd, no functorch wrapper; 16-bit inputs are widened per
    tile to the tables' float32)."""
    if xs[0].numel() < _FILL_FROM or array_api.is_traced(xs[0]):
        return False
    if xs[0].dtype not in (cos.dtype, torch.bfloat16, torch.float16):
        return False
    return torch_native.out_ops_allowed(*xs) and torch_native.out_ops_allowed(cos, sin)


def _gather(table: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rows ``table[positions]``, ``[*positions.shape, 2, r]``. Eager: one index_select, whose
    own bounds check (on the device: no host read) raises for a position outside the table,
    and the error then names it (on CUDA it is a device-side assert). Compiled: NaN rows for
    such positions, like ``posenc.learned``."""
    n = table.shape[0]
    flat_table = table.view(n, -1)
    if array_api.is_traced(positions):
        rows = learned.learned(positions, flat_table)
    else:
        index = positions.reshape(-1)
        if index.dtype not in (torch.int32, torch.int64):
            index = index.to(torch.int32)  # narrow ints: exact, and what index_select takes
        try:
            rows = torch.index_select(flat_table, 0, index)
        except IndexError:
            outside = index[(index < 0) | (index >= n)]
            if outside.numel() == 0:
                raise
            array_api.raise_out_of_range("positions", int(outside[0]), 0, n)
    return rows.view(*positions.shape, *table.shape[1:])


def _rotate_full(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rd: int,
                 layout: str) -> torch.Tensor:
    """x rotated by full-width ``cos`` and signed ``sin`` (float32): ``x * cos + partner * sin``,
    the partner of a feature being the other member of its pair: three ops for a float32 head,
    with the roundings of rotate()'s addcmul."""
    head = x if rd == x.shape[-1] else x[..., :rd]
    if head.dtype != cos.dtype:  # 16-bit inputs: the arithmetic runs in float32 like rope()
        head = head.to(cos.dtype)
    if layout == "half":
        partner = head.roll(rd // 2, -1)
    else:
        partner = head.unflatten(-1, (rd // 2, 2)).flip(-1).flatten(-2)
    out = torch.addcmul(head * cos, partner, sin)
    if out.dtype != x.dtype:
        out = out.to(x.dtype)
    return out if rd == x.shape[-1] else torch.cat([out, x[..., rd:]], -1)


def _rotate_into(x: torch.Tensor, target: torch.Tensor, cos: Any, sin: Any, rd: int,
                 layout: str) -> None:
    """``target[..., :rd]`` = x rotated by the full-width ``cos`` and signed ``sin``
    (``target`` may be ``x`` itself); the rest copied. A large CPU call is one Inductor loop
    (inductor_rotation.py), else cache-sized tiles; 16-bit inputs in float32 like rope().
    With autograd or a functorch wrapper (no out= ops), the rotation is made and then
    copied."""
    out_ops = torch_native.out_ops_allowed(x, target) and torch_native.out_ops_allowed(cos, sin) \
        and x.dtype in (cos.dtype, torch.bfloat16, torch.float16)
    if out_ops and rd == x.shape[-1] and rotate_compiled(x, target, cos, sin, layout):
        return
    cos_h, sin_h = pair_views(cos, rd, layout)[0], pair_views(sin, rd, layout)[1]
    if out_ops:
        rotate_tiled(x, target, cos_h, sin_h, rd, layout)
        return
    xp = array_api.namespace(x=x)
    target.copy_(rotary.apply_cos_sin(xp, x, cos_h, sin_h, rotary_dim=rd, layout=layout))


_HARNESS_TABLE = 4096  # rows of the harness's cos/sin tables; positions beyond use rope()


def rotary_factory(config: dict[str, Any], arrays: dict[str, Any], compiled: bool) -> Any:
    head_dim = operator.index(arrays["x"].shape[-1])
    try:
        table = RotaryEmbedding(head_dim, **config, max_positions=_HARNESS_TABLE,
                                device=arrays["x"].device)
    except ParameterError:  # e.g. dynamic NTK without seq_len: no table
        table = None
    try:  # no table: cos/sin per call (the full-width exact path in eager mode)
        plain = RotaryEmbedding(head_dim, **config)
    except ParameterError:  # let the call raise it, as rope() would
        plain = RotaryEmbedding(**config)
    runners = {m: torch.compile(m, fullgraph=True) if compiled else m
               for m in (table, plain) if m is not None}

    def in_table(x: torch.Tensor, positions: Any) -> bool:
        if table is None:
            return False
        if positions is None:
            return x.shape[-2] <= _HARNESS_TABLE
        return (not positions.dtype.is_floating_point and positions.numel() > 0
                and int(positions.min()) >= 0 and int(positions.max()) < _HARNESS_TABLE)

    def run(weights: dict[str, Any], arrays: dict[str, Any]) -> Any:
        x, positions = arrays["x"], arrays.get("positions")
        with torch.set_grad_enabled(not compiled):
            if in_table(x, positions):
                runner = runners[table]
                q, k = runner(x, k=x, offset=0) if positions is None else \
                    runner(x, positions, k=x)
            else:
                q, k = runners[plain](x, positions, k=x)
        if not torch.equal(q.detach(), k.detach()) and not (q.isnan() | k.isnan()).any():
            raise AssertionError("RotaryEmbedding rotated q and k = q differently")
        return q

    return run
