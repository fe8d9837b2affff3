"""PyTorch ``nn.Module``s for the encodings: ``from posenc.backends import torch as pe``.

Every :class:`posenc.layers.Layer` becomes a module class (``pe.T5RelativeBias(num_heads=12)``)
whose trainable arguments are ``nn.Parameter``s named after the function's arguments (so a
``state_dict`` maps onto them), and whose ``forward`` is the shared, conformance-verified
function. ``pe.RotaryEmbedding`` adds what a model needs from RoPE: cos/sin tables built once,
q and k rotated in one pass (k may have fewer heads: grouped-query attention), and in-place or
``out=`` rotation.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from posenc import _params, _xp
from posenc.encodings import _rotary, learned
from posenc.encodings.rope import _resolve, rope
from posenc.errors import ParameterError
from posenc.layers import Init, Layer, all_layers

__all__ = ["RotaryEmbedding", "layer_class", "layer_classes", "layer_factory"]


def _initial(init: Init, shape: tuple[int, ...], dtype: Any, device: Any) -> torch.Tensor:
    out = torch.empty(shape, dtype=dtype, device=device)
    with torch.no_grad():
        if init.kind == "normal":
            out.normal_(0.0, init.a)
        elif init.kind == "uniform":
            out.uniform_(init.a, init.b)
        elif init.kind in ("zeros", "ones", "constant"):
            out.fill_({"zeros": 0.0, "ones": 1.0}.get(init.kind, init.a))
        elif init.kind == "identity":
            out.copy_(torch.eye(shape[0], dtype=dtype, device=device))
        else:
            raise ParameterError(f"unknown initialiser kind {init.kind!r}")
    return out


def _takes_dtype(layer: Layer) -> bool:
    import inspect

    return "dtype" in inspect.signature(layer.implementation()).parameters


class _LayerModule(nn.Module):
    """Base of the generated classes: weights as parameters, config fixed, forward = function."""

    layer: Layer
    _function: Any  # the implementation, bound at class creation (nothing to look up in a trace)

    def __init__(self, *, dtype: Any = None, device: Any = None, **kwargs: Any) -> None:
        super().__init__()
        config = self.layer.resolve_config(kwargs)
        shapes = self.layer.weight_shapes(config)
        dtype = dtype or torch.get_default_dtype()
        weights = {w.name: _initial(w.init, shapes[w.name], dtype, device) if w.name in shapes
                   else None for w in self.layer.weights}
        self._setup(config, weights, dtype, device)

    @classmethod
    def from_weights(cls, weights: Mapping[str, torch.Tensor | None], *, dtype: Any = None,
                     device: Any = None, **config: Any) -> _LayerModule:
        """A module holding copies of existing weights (shapes come from them)."""
        module = cls.__new__(cls)
        nn.Module.__init__(module)
        unknown = sorted(set(weights) - set(cls.layer.weight_names))
        if unknown:
            raise ParameterError(f"{cls.layer.name}: unknown weight(s) {', '.join(unknown)} "
                                 f"(weights: {', '.join(cls.layer.weight_names)})")
        resolved = cls.layer.config_from_weights(weights, config)
        copies = {n: None if w is None else w.detach().clone() for n, w in weights.items()}
        first = next((w for w in copies.values() if w is not None), None)
        dtype = dtype or (first.dtype if first is not None else torch.get_default_dtype())
        device = device or (first.device if first is not None else None)
        module._setup(resolved, copies, dtype, device)
        return module

    def _setup(self, config: dict[str, Any], weights: Mapping[str, torch.Tensor | None],
               dtype: Any, device: Any) -> None:
        self.config = config
        self._kwargs = self.layer.function_kwargs(config)
        self._call_names = [p.name for p in self.layer.call_parameters()]
        for w in self.layer.weights:
            value = weights.get(w.name)
            self.register_parameter(w.name, None if value is None else nn.Parameter(value))
        if _takes_dtype(self.layer):
            # follows .to(dtype/device) like a parameter; tells the function where to build
            self.register_buffer("_anchor", torch.empty(0, dtype=dtype, device=device),
                                 persistent=False)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) > len(self._call_names):
            raise ParameterError(f"{self.layer.name}: {len(args)} positional arguments, "
                                 f"expected at most {len(self._call_names)} "
                                 f"({', '.join(self._call_names)})")
        call = dict(zip(self._call_names, args, strict=False))
        clash = sorted(set(call) & set(kwargs))
        if clash:
            raise ParameterError(f"{self.layer.name}: {', '.join(clash)} given twice")
        call.update(kwargs)
        weights = {w.name: getattr(self, w.name) for w in self.layer.weights}
        if hasattr(self, "_anchor"):
            call.update(dtype=self._anchor.dtype, device=self._anchor.device)
        return self._function(**call, **weights, **self._kwargs)

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.config.items())


@functools.cache
def layer_class(name: str) -> type[nn.Module]:
    """The ``nn.Module`` class of layer ``name`` (``RotaryEmbedding`` is hand-written)."""
    if name == "RotaryEmbedding":
        return RotaryEmbedding
    layer = all_layers()[name]
    return type(name, (_LayerModule,), {
        "layer": layer, "_function": staticmethod(layer.implementation()),
        "__doc__": _doc(layer), "__module__": "posenc.backends.torch"})


def layer_classes() -> dict[str, type[nn.Module]]:
    return {name: layer_class(name) for name in all_layers()}


def _doc(layer: Layer) -> str:
    sizes = ", ".join(layer.sizes) or "none"
    return (f"{layer.doc}.\n\nComputes posenc.{layer.function}. Constructor: sizes ({sizes}), "
            f"the function's {', '.join(layer.config) or 'no'} parameters, dtype=, device=. "
            f"Parameters: {', '.join(layer.weight_names) or 'none'}.")


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
        _params.choice("layout", layout, _rotary.LAYOUTS)
        self.head_dim = None if head_dim is None else _params.integer("head_dim", head_dim,
                                                                       minimum=2)
        self.max_positions = max_positions
        self._schedule = None
        if self.head_dim is not None:
            # the schedule as rope() resolves it for explicit positions (LongRoPE switches at
            # run time); dynamic NTK depends on the length, so it needs seq_len for a table
            dynamic = scaling is not None and (scaling.get("rope_type") or scaling.get("type")) \
                == "dynamic"
            if not (dynamic and seq_len is None):
                self._schedule = _resolve(self.head_dim, rotary_dim, base, scaling, seq_len,
                                          positions=True, seq=0)
        if max_positions is not None:
            if self._schedule is None:
                raise ParameterError(
                    f"max_positions={max_positions!r} needs head_dim (and seq_len for dynamic "
                    "scaling): the tables depend on them")
            if isinstance(max_positions, bool) or not isinstance(max_positions, int) \
                    or not 0 < max_positions <= _xp.FLOAT32_EXACT_INTEGERS:
                raise ParameterError(f"max_positions={max_positions!r} must be an int in "
                                     f"[1, 2**24]")
        self._build_tables(device)

    def _build_tables(self, device: Any) -> None:
        names = ("cos", "sin", "cos_long", "sin_long")
        tables: list[torch.Tensor | None] = [None] * 4
        if self.max_positions is not None:
            xp = _xp.namespace(x=torch.empty(0))
            p = torch.arange(self.max_positions, dtype=torch.float32, device=device)[:, None]
            sched = self._schedule
            freqs = [sched.inv_freq] + ([sched.long_inv_freq] if sched.long_inv_freq else [])
            for i, inv_freq in enumerate(freqs):
                angles = _rotary.phases(xp, p, inv_freq, compute=torch.float32, device=device)
                tables[2 * i: 2 * i + 2] = _rotary.cos_sin(xp, angles, sched.attention_factor)
        for name, table in zip(names, tables, strict=True):
            self.register_buffer(name, table, persistent=False)

    def _apply(self, fn: Any, recurse: bool = True) -> RotaryEmbedding:
        super()._apply(fn, recurse)
        if self.cos is not None and self.cos.dtype != torch.float32:  # .half() etc.
            self._build_tables(self.cos.device)
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
        offset = _params.integer("offset", offset)
        return torch.arange(offset, offset + seq, device=x.device)

    def _uses_table(self, x: torch.Tensor, positions: Any) -> bool:
        return (self.cos is not None and x.dtype != torch.float64 and positions is not None
                and hasattr(positions, "dtype") and not positions.dtype.is_floating_point)

    def _cos_sin(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[Any, Any, int]:
        xp = _xp.namespace(x=x)
        seq, dim = _rotary.check_shapes(x, positions)
        if dim != self.head_dim:
            raise ParameterError(f"x.shape[-1]={dim} but this RotaryEmbedding has "
                                 f"head_dim={self.head_dim}")
        _xp.check_positions_dtype(xp, positions)
        cos = learned.learned(positions, self.cos)
        sin = learned.learned(positions, self.sin)
        sched = self._schedule
        if self.cos_long is not None:
            long = torch.max(positions) + 1 > sched.switch_length
            cos = torch.where(long, learned.learned(positions, self.cos_long), cos)
            sin = torch.where(long, learned.learned(positions, self.sin_long), sin)
        rd = sched.rotary_dim
        if positions.ndim == 2:  # line batch up with x[b, ..., s, :]
            shape = (cos.shape[0], *([1] * (x.ndim - 3)), seq, rd // 2)
            cos, sin = cos.reshape(shape), sin.reshape(shape)
        return cos, sin, rd

    # -- rotation ------------------------------------------------------------------------
    def forward(self, q: torch.Tensor, positions: Any = None, *, k: torch.Tensor | None = None,
                offset: Any = None, inplace: bool = False, out: Any = None) -> Any:
        xs = (q,) if k is None else (q, k)
        outs, direct = self._outputs(xs, out, inplace)
        positions = self._positions(q, positions, offset)
        if positions is None and self.cos is not None:
            positions = torch.arange(operator.index(q.shape[-2]), device=q.device)
        xp = _xp.namespace(x=q, positions=positions, k=k)
        _, positions = _rotary.array_inputs(xp, q, positions)
        if self.head_dim is not None and q.shape[-1] != self.head_dim:
            raise ParameterError(f"x.shape[-1]={q.shape[-1]} but this RotaryEmbedding has "
                                 f"head_dim={self.head_dim}")
        if k is not None:
            _check_pair(q, k)
        if self._uses_table(q, positions):
            cos, sin, rd = self._cos_sin(q, positions)
            layout = self.config["layout"]
            if outs is not None and direct:
                for x, target in zip(xs, outs, strict=True):
                    _rotate_into(x, target, cos, sin, rd, layout)
                return outs[0] if k is None else outs
            results = tuple(_rotary.apply_cos_sin(xp, x, cos, sin, rotary_dim=rd, layout=layout)
                            for x in xs)
        else:
            results = tuple(rope(x, positions, **self.config) for x in xs)
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
            if len(xs) == 2 and _same_view(*xs):
                raise ParameterError("inplace=True with k the same memory as q: it would be "
                                     "rotated twice; pass k=None")
            return xs, not (len(xs) == 2 and _may_overlap(*xs))
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
        if len(outs) == 2 and _same_view(*outs):
            raise ParameterError("out[0] and out[1] are the same memory")
        # an output that is its own input is rotated in place
        outs = tuple(x if _same_view(o, x) else o for x, o in zip(xs, outs, strict=True))
        n = len(xs)
        direct = not any(_may_overlap(outs[i], t) for i in range(n) for t in (
            *(xs[j] for j in range(n) if j != i), *(outs[j] for j in range(n) if j != i),
            *([] if outs[i] is xs[i] else [xs[i]])))
        return outs, direct


def _same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a is b:
        return True
    if torch.compiler.is_compiling():
        return False
    return (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride())


def _may_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors may share memory: their extents in one storage intersect, unless
    they are provably disjoint slices of one tensor (q and k views of a fused qkv tensor).
    Under torch.compile (no storages; it handles aliasing itself): False."""
    if torch.compiler.is_compiling() or a.numel() == 0 or b.numel() == 0:
        return False
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    (a0, a1), (b0, b1) = _extent(a), _extent(b)
    return a0 < b1 and b0 < a1 and not _disjoint_slices(a, b)


def _extent(t: torch.Tensor) -> tuple[int, int]:
    low = high = t.storage_offset()
    for size, stride in zip(t.shape, t.stride(), strict=True):
        reach = (size - 1) * stride
        low, high = (low + reach, high) if reach < 0 else (low, high + reach)
    return low, high + 1


def _disjoint_slices(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same strides, nested (each larger than the span of the smaller ones, so an offset has
    one decomposition), and offsets that differ by m strides along one dim whose index
    ranges do not meet: no element in common."""
    if a.ndim != b.ndim or a.stride() != b.stride() or min(a.stride(), default=0) <= 0:
        return False
    dims = sorted(range(a.ndim), key=lambda d: a.stride(d))
    span = 0
    for d in dims:
        if a.stride(d) <= span:
            return False
        span += (max(a.shape[d], b.shape[d]) - 1) * a.stride(d)
    delta = b.storage_offset() - a.storage_offset()
    for d in reversed(dims):  # the digits of delta, largest stride first
        m, delta = divmod(delta, a.stride(d)) if delta >= 0 else (-((-delta) // a.stride(d)),
                                                                  -((-delta) % a.stride(d)))
        if m >= a.shape[d] or -m >= b.shape[d]:
            return True  # b starts beyond a (or a beyond b) along d
        if m != 0:
            return False
    return False


def _check_pair(q: torch.Tensor, k: torch.Tensor) -> None:
    if k.ndim != q.ndim or k.shape[-1] != q.shape[-1] or k.shape[-2] != q.shape[-2] \
            or (q.ndim >= 3 and k.shape[0] != q.shape[0]):
        raise ParameterError(
            f"k has shape {tuple(k.shape)} but q has shape {tuple(q.shape)}: k must share the "
            "batch, sequence and head_dim of q (it may have fewer heads)")
    if q.dtype != k.dtype:
        raise ParameterError(f"q is {q.dtype} but k is {k.dtype}")


def _pair_views(t: torch.Tensor, rd: int, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    if layout == "half":
        return t[..., : rd // 2], t[..., rd // 2 : rd]
    return t[..., 0:rd:2], t[..., 1:rd:2]


def _rotate_into(x: torch.Tensor, target: torch.Tensor, cos: Any, sin: Any, rd: int,
                 layout: str) -> None:
    """``target[..., :rd]`` = x rotated (``target`` may be ``x`` itself); the rest copied."""
    if x.dtype != cos.dtype:  # 16-bit inputs: the arithmetic runs in float32 like rope()
        xp = _xp.namespace(x=x)
        rotated = _rotary.apply_cos_sin(xp, x, cos, sin, rotary_dim=rd, layout=layout)
        target.copy_(rotated)
        return
    a, b = _pair_views(x, rd, layout)
    if target is x:
        old_a = a.clone()  # the only temporary: half the rotated features
        a.mul_(cos).addcmul_(b, sin, value=-1)
        b.mul_(cos).addcmul_(old_a, sin)
        return
    ta, tb = _pair_views(target, rd, layout)
    torch.mul(a, cos, out=ta).addcmul_(b, sin, value=-1)
    torch.mul(b, cos, out=tb).addcmul_(a, sin)
    if rd < x.shape[-1]:
        target[..., rd:].copy_(x[..., rd:])


def layer_factory(layer: Layer, weights: dict[str, Any], config: dict[str, Any],
                    static: dict[str, Any], arrays: dict[str, Any], compiled: bool) -> Any:
    """The conformance harness's view of a layer (see ``backends/layer_binding.py``): the module
    built from the weight arrays, compiled with ``torch.compile(fullgraph=True)`` when asked.
    ``rope`` goes through ``RotaryEmbedding`` with q and k in one pass (k = q, so both results
    must agree bit for bit) and, for integer positions in [0, 2^16), its cos/sin tables."""
    static = dict(static)
    dtype, device = static.pop("dtype", None), static.pop("device", None)
    if layer.name == "RotaryEmbedding":
        return _rotary_factory(config, arrays, compiled)
    module = layer_class(layer.name).from_weights(weights, dtype=dtype, device=device, **config)
    runner = torch.compile(module, fullgraph=True) if compiled else module

    def run(weights: dict[str, Any], arrays: dict[str, Any]) -> Any:
        present = {name: value for name, value in weights.items() if value is not None}
        if not compiled:  # the arrays become the parameters, so gradients reach them
            return torch.func.functional_call(module, present, kwargs={**arrays, **static})
        with torch.no_grad():
            for name, value in present.items():
                getattr(module, name).copy_(value)
            return runner(**arrays, **static)

    return run


_HARNESS_TABLE = 4096  # rows of the harness's cos/sin tables; positions beyond use rope()


def _rotary_factory(config: dict[str, Any], arrays: dict[str, Any], compiled: bool) -> Any:
    head_dim = operator.index(arrays["x"].shape[-1])
    try:
        table = RotaryEmbedding(head_dim, **config, max_positions=_HARNESS_TABLE,
                                device=arrays["x"].device)
    except ParameterError:  # e.g. dynamic NTK without seq_len: no table
        table = None
    plain = RotaryEmbedding(**config)  # no table: cos/sin per call, as rope()
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
