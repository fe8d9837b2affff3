"""FlexAttention score_mods checked against the materialised bias (the ALiBi, T5 and KERPLE
``*_flex_score_mod`` properties).

``flex_attention(q, k, v, score_mod=<posenc.backends.torch.flex factory>(...))`` must equal
``posenc.attention(q, k, v, bias=<the backend's own materialised bias>)`` and the float64
reference attention with the reference bias; the score_mod must hold no ``[q_len, k_len]``
tensor; in float64, gradients of the weights (T5's table, KERPLE's r1, r2) through
flex_attention must match finite differences of the reference. Only backends whose arrays are
torch tensors can run it: the others report unsupported. A backend may bring its own factory as
``overrides["t5_score_mod"]`` (and so on); the shipped ones are used otherwise.
"""

from __future__ import annotations

import math
import types
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from posenc import catalog
from posenc.encodings.attention import attention
from posenc.reference.attention import attention as reference_attention
from posenc.specs import resolve_params

from ..context import CheckFailure, Context, Unsupported, UpstreamFailure
from ..gradients import ATOL, RTOL, STEP
from ..tolerances import EPS, Tolerance, tolerance_for

BATCH, HEAD_DIM = 2, 16  # compiled flex_attention on CUDA needs head_dim >= 16
# state a score_mod may hold: O(heads · (q_len + k_len)); the shapes used make the
# materialised bias (heads · q_len · k_len) several times larger than this bound
STATE_PER_HEAD_AND_POSITION = 2


def _flex(ctx: Context) -> tuple[Any, Callable[..., Any], Callable[..., Any]]:
    """(torch, flex_attention, create_block_mask), or Unsupported."""
    probe = ctx.backend.from_numpy(np.zeros(1), ctx.dtype, ctx.device)
    if not type(probe).__module__.startswith("torch"):  # no torch import for other backends
        raise Unsupported(f"backend {ctx.backend.name!r} does not compute with torch tensors: "
                          "FlexAttention score_mods are PyTorch's")
    import torch

    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        raise Unsupported(f"torch {torch.__version__} has no FlexAttention (torch >= 2.5)") \
            from None
    if ctx.mode == "compiled" and ctx.dtype == "float64" and ctx.device == "cpu":
        raise Unsupported("compiled FlexAttention on CPU takes float32, bfloat16 and float16 "
                          "only")
    if ctx.mode == "compiled":
        # torch.compile(flex_attention) is how FlexAttention is meant to run. Static shapes:
        # with dynamic ones (after a recompile for new shapes) Inductor's CPU template emits
        # C++ that does not build once a score_mod indexes a captured tensor (torch 2.13)
        key = ("flex_attention",)
        if key not in ctx._compiled:
            ctx._compiled[key] = torch.compile(flex_attention, dynamic=False)
        flex_attention = ctx._compiled[key]
    return torch, flex_attention, create_block_mask


def factory(ctx: Context, name: str) -> Callable[..., Any]:
    """The backend's own score_mod factory ``name`` (``overrides``), or posenc's."""
    if name in ctx.backend.overrides:
        return ctx.backend.overrides[name]
    from posenc.backends.torch import flex as torch_flex

    return getattr(torch_flex, name)


def captured_tensors(fn: Callable[..., Any], tensor_type: type) -> list[Any]:
    """Tensors reachable from a callable's closure, defaults, partial arguments, bound
    ``self`` and the globals its code names (nested functions followed a few levels)."""
    found: dict[int, Any] = {}
    seen: set[int] = set()

    def visit(obj: Any, depth: int) -> None:
        if id(obj) in seen or depth > 6:
            return
        seen.add(id(obj))
        if isinstance(obj, tensor_type):
            found[id(obj)] = obj
        elif isinstance(obj, list | tuple | set | frozenset):
            for item in obj:
                visit(item, depth + 1)
        elif isinstance(obj, dict):
            for item in obj.values():
                visit(item, depth + 1)
        elif isinstance(obj, partial):
            visit(obj.func, depth + 1)
            visit(obj.args, depth + 1)
            visit(obj.keywords, depth + 1)
        elif isinstance(obj, types.MethodType):
            visit(obj.__self__, depth + 1)
            visit(obj.__func__, depth + 1)
        elif isinstance(obj, types.FunctionType):
            for cell in obj.__closure__ or ():
                try:
                    visit(cell.cell_contents, depth + 1)
                except ValueError:  # an empty cell
                    pass
            visit(obj.__defaults__ or (), depth + 1)
            visit(obj.__kwdefaults__ or {}, depth + 1)
            for name in obj.__code__.co_names:
                value = obj.__globals__.get(name)
                if isinstance(value, tensor_type | types.FunctionType | list | tuple | dict):
                    visit(value, depth + 1)
        elif callable(obj) and not isinstance(obj, type | types.ModuleType):
            visit(getattr(obj, "__dict__", {}), depth + 1)  # a callable object's attributes

    visit(fn, 0)
    return list(found.values())


def _held(t: Any) -> int:
    """Elements of memory a tensor keeps alive (its storage: a view of a big tensor is big)."""
    return int(t.untyped_storage().nbytes()) // max(int(t.element_size()), 1)


def _check_state(torch: Any, name: str, score_mod: Any, heads: int, q_len: int,
                 k_len: int) -> None:
    """No [q_len, k_len] state: what the score_mod holds grows like heads · (q_len + k_len)."""
    captured = captured_tensors(score_mod, torch.Tensor)
    held = sum(_held(t) for t in captured)
    bound = STATE_PER_HEAD_AND_POSITION * heads * (q_len + k_len)
    if held > bound:
        shapes = ", ".join(str(tuple(t.shape)) for t in captured)
        raise CheckFailure(f"{name}: the score_mod holds {held} elements (tensors {shapes}), more "
                           f"than {bound} = {STATE_PER_HEAD_AND_POSITION}·heads·(q_len + k_len): "
                           f"a materialised bias is {heads * q_len * k_len}")


def _causal(ctx: Context, create_block_mask: Any, device: Any, query_offset: int | None,
            q_len: int, k_len: int) -> tuple[Any, Any, Any]:
    """``(mask, backend mask, block mask)`` hiding keys after ``query_offset + i`` (all None
    without an offset)."""
    if query_offset is None:
        return None, None, None
    mask = np.arange(k_len)[None, :] <= query_offset + np.arange(q_len)[:, None]
    mask_t = ctx.backend.from_numpy(mask, "bool", ctx.device)
    mask_mod = factory(ctx, "causal_mask_mod")(query_offset, device=device)
    return mask, mask_t, create_block_mask(mask_mod, None, None, q_len, k_len, device=device)


def check_score_mod(
    ctx: Context, *, name: str, build: Callable[[Callable[..., Any], dict[str, Any], Any], Any],
    inputs: dict[str, np.ndarray], params: dict[str, Any], heads: int, q_len: int, k_len: int,
    query_offset: int | None, scale: float | None, flex_bias_rtol: float,
) -> None:
    """The body of the flex properties.

    ``build(factory, arrays, device)`` makes the score_mod from the backend's arrays of
    ``inputs``; ``params`` call the encoding (merged with the property's ``ctx.params``) for
    the materialised and reference biases. ``query_offset`` (None: no mask) masks keys after
    ``query_offset + i``. ``flex_bias_rtol · max|reference bias|`` bounds how far the score_mod's
    bias may be from the float64 reference (0 for T5's copied table entries).
    """
    torch, flex, create_block_mask = _flex(ctx)
    make = factory(ctx, name)
    device = ctx.backend.device_object(ctx.device)
    arrays = {n: ctx._convert(n, v) for n, v in inputs.items()}
    score_mod = build(make, arrays, device)

    _check_state(torch, name, score_mod, heads, q_len, k_len)

    q = ctx.normal((BATCH, heads, q_len, HEAD_DIM), 11)
    k = ctx.normal((BATCH, heads, k_len, HEAD_DIM), 12)
    v = ctx.normal((BATCH, heads, k_len, HEAD_DIM), 13)
    qt, kt, vt = (ctx.backend.from_numpy(a, ctx.dtype, ctx.device) for a in (q, k, v))
    mask, mask_t, block_mask = _causal(ctx, create_block_mask, device, query_offset, q_len,
                                       k_len)

    def run_flex(mod: Any) -> Any:
        with warnings.catch_warnings():  # eager mode: "called without torch.compile()"
            warnings.filterwarnings("ignore", message=".*flex_attention called without")
            return flex(qt, kt, vt, score_mod=mod, block_mask=block_mask, scale=scale)

    got = ctx.to_numpy(run_flex(score_mod))
    bias = ctx.raw(inputs, **params)
    materialised = ctx.to_numpy(attention(qt, kt, vt, bias=bias, mask=mask_t, scale=scale))
    reference = catalog.reference_function(ctx.spec)
    resolved = resolve_params(ctx.spec, {**ctx.params, **params})
    ref_bias = reference(*inputs.values(), **resolved)
    s = 1.0 / math.sqrt(HEAD_DIM) if scale is None else scale
    want = reference_attention(q, k, v, ref_bias, mask, scale=s)
    if got.shape != want.shape:
        raise CheckFailure(f"{name}: flex_attention output shape {got.shape}, expected "
                           f"{want.shape}")

    # Logits are q·kᵀ·scale + bias, computed in float32 (float64 for float64) on both sides,
    # each within (HEAD_DIM + 3)·eps of |q|·|k|·scale + |bias|; the score_mod's bias within
    # flex_bias_rtol of the reference, the materialised bias within the spec's tolerance taken
    # relative to each entry (a rounded bias is off by a fraction of its own size).
    eps = EPS["float64" if ctx.dtype == "float64" else "float32"]
    magnitude = np.abs(q) @ np.swapaxes(np.abs(k), -1, -2) * s + np.abs(ref_bias)
    logit_error = 2 * (HEAD_DIM + 3) * eps * magnitude + flex_bias_rtol * np.abs(ref_bias)
    spec_bias = (ctx.tol.rtol + ctx.tol.atol) * np.abs(ref_bias)
    logits = q @ np.swapaxes(k, -1, -2) * s + ref_bias
    base = tolerance_for(ctx.dtype, catalog.specs()["attention"].tolerances)
    scale_v = float(np.abs(v).max())
    for what, expected, error in (
            ("the float64 reference attention with the reference bias", want, logit_error),
            (f"posenc.attention with the backend's {ctx.spec.function}", materialised,
             logit_error + spec_bias)):
        moved = output_error_bound(logits, error, mask, v)
        tol = Tolerance(ctx.dtype, rtol=base.rtol, atol=base.atol + moved / scale_v, angle=0.0,
                        reason=f"attention's tolerance + {moved:.3g} from logit errors")
        try:
            ctx.assert_close(got, expected, f"{name}: flex_attention vs {what}", scale=scale_v,
                             tol=tol)
        except CheckFailure as failure:
            if ctx.mode == "compiled":
                blame_torch_if_control_fails(torch, flex, (qt, kt, vt), block_mask, scale,
                                             scale_v, failure)
            raise

    if ctx.dtype != "float64":  # gradients in float64, where finite differences are sharp
        return
    for weight in inputs:
        _check_gradient(ctx, torch, run_flex, build, make, arrays, inputs, weight, resolved,
                        reference, q, k, v, mask, s, name)


# A compiled kernel off by this fraction of max|v| without any score_mod is broken, not rounded
CONTROL_LIMIT = 0.1


def control_error(torch: Any, compiled_flex: Callable[..., Any], qkv: tuple[Any, Any, Any],
                  block_mask: Any, scale: float | None) -> float:
    """Max |compiled − eager| of torch's own flex_attention with no score_mod: a control that
    runs no posenc code, on the same shapes, dtype and block mask."""
    from torch.nn.attention.flex_attention import flex_attention

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*flex_attention called without")
        got = compiled_flex(*qkv, block_mask=block_mask, scale=scale)
        want = flex_attention(*qkv, block_mask=block_mask, scale=scale)
    return float((got.double() - want.double()).abs().nan_to_num(nan=math.inf).max())


def blame_torch_if_control_fails(torch: Any, compiled_flex: Callable[..., Any],
                                 qkv: tuple[Any, Any, Any], block_mask: Any,
                                 scale: float | None, scale_v: float,
                                 failure: CheckFailure) -> None:
    """Raise :class:`UpstreamFailure` when torch's compiled flex_attention is wrong on these
    shapes without any score_mod (docs/known-issues.md: Inductor's CPU template with the
    AVX2 vector ISA, torch 2.13, key lengths 8 mod 16); return to let ``failure`` stand."""
    error = control_error(torch, compiled_flex, qkv, block_mask, scale)
    if not error > CONTROL_LIMIT * scale_v:
        return
    shapes = " ".join(f"{n}{tuple(t.shape)}" for n, t in zip("qkv", qkv, strict=True))
    raise UpstreamFailure(
        f"torch {torch.__version__}'s compiled flex_attention is wrong here with no score_mod "
        f"at all (compiled vs eager flex_attention, {shapes}, {qkv[0].dtype}, "
        f"{qkv[0].device}: max abs error {error:.3g} > {CONTROL_LIMIT}·max|v|), so the "
        f"score_mod cannot be judged on this machine; see docs/known-issues.md. "
        f"The check's own failure: {failure}")


def output_error_bound(logits: np.ndarray, error: np.ndarray, mask: np.ndarray | None,
                       v: np.ndarray) -> float:
    """The most that logit errors |δ_j| <= error_j can move softmax(logits)·v, per query row:
    with p' = p·e^δ / Σ p·e^δ, each weight stays within [p_j·e^(−ε_j) / Σ p·e^ε,
    p_j·e^(ε_j) / Σ p·e^(−ε)], so |Δ(p·v)| <= Σ_j max|p'_j − p_j|·|v_j|. Rigorous (not first
    order) and sharp where it matters: a large error on a logit far below the row's maximum
    (a large negative bias) has a negligible weight. Computed in log space, in float64."""
    full = np.broadcast_shapes(logits.shape, error.shape)
    z = np.broadcast_to(logits, full).astype(np.float64)
    e = np.broadcast_to(error, full)
    if mask is not None:
        z = np.where(mask, z, -np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_p = z - _logsumexp(z)
        log_high = _logsumexp(log_p + e)  # log Σ p·e^ε
        log_low = _logsumexp(log_p - e)  # log Σ p·e^(−ε)
        p = np.exp(log_p)
        above = np.exp(log_p + e - log_low) - p
        below = p - np.exp(log_p - e - log_high)
    moved = np.nan_to_num(np.maximum(above, below), nan=0.0)  # masked entries: no weight
    return float((moved @ np.abs(v)).max(initial=0.0))


def _logsumexp(x: np.ndarray) -> np.ndarray:
    top = np.max(x, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    return top + np.log(np.sum(np.exp(x - top), axis=-1, keepdims=True))


def _check_gradient(ctx: Context, torch: Any, run_flex: Callable[[Any], Any],
                    build: Callable[..., Any], make: Callable[..., Any], arrays: dict[str, Any],
                    inputs: dict[str, np.ndarray], weight: str, resolved: dict[str, Any],
                    reference: Callable[..., Any], q: np.ndarray, k: np.ndarray, v: np.ndarray,
                    mask: np.ndarray | None, scale: float, name: str) -> None:
    """d/d(weight) of <u, flex output> along a random direction: autograd through
    flex_attention against central differences of the float64 reference."""
    rng = np.random.default_rng(20261124)
    cotangent = rng.standard_normal((BATCH, *q.shape[1:-1], v.shape[-1]))
    direction = rng.standard_normal(inputs[weight].shape)
    leaf = arrays[weight].detach().clone().requires_grad_(True)
    score_mod = build(make, {**arrays, weight: leaf}, ctx.backend.device_object(ctx.device))
    out = run_flex(score_mod)
    (grad,) = torch.autograd.grad(out, [leaf], grad_outputs=ctx.backend.from_numpy(
        cotangent, ctx.dtype, ctx.device), allow_unused=True)
    if grad is None:
        raise CheckFailure(f"{name}: no gradient reaches {weight} through flex_attention")
    g = ctx.backend.to_numpy(grad)
    autodiff = float(np.sum(g * direction))

    def evaluate(shift: np.ndarray) -> np.ndarray:
        values = {**inputs, weight: inputs[weight] + shift}
        return reference_attention(q, k, v, reference(*values.values(), **resolved), mask,
                                   scale=scale)

    finite = float(np.sum(cotangent * (evaluate(STEP * direction) - evaluate(-STEP * direction))
                          / (2 * STEP)))
    allowed = RTOL * max(abs(finite), float(np.sum(np.abs(g * direction)))) + ATOL
    if not abs(autodiff - finite) <= allowed:
        raise CheckFailure(
            f"{name}: d/d{weight} along a random direction through flex_attention: autograd "
            f"{autodiff:.10g}, finite differences of the reference {finite:.10g} "
            f"(|diff| {abs(autodiff - finite):.3g} > {allowed:.3g})",
            {"input": weight, "autodiff": autodiff, "finite_difference": finite})
