"""What vLLM rotates for a family it serves through its Transformers modeling backend.

vLLM 0.32 serves some families (OLMo, Phi, GPT-NeoX, StarCoder 2, ...) by running
transformers' own modeling code inside its model runner: its config, its positions, its
attention op in place of transformers'. The rotation is transformers' code, but what it is
handed is vLLM's, so the sweep observes it there: the whole model's forward runs as vLLM
calls it (``model(input_ids, positions)``, seeded weights: :func:`.vllm_observer.build`),
its attention op stubbed (it needs batch metadata), and every call of the modeling module's
``apply_rotary_pos_emb`` recorded with the q and k it took and gave back, for the layer whose
attention made it; each is graded at a prefill of 8 positions and at single decode tokens.
Where the model normalises q and k after rotating them (HunYuan), this is the only point
where the rotation alone can be seen.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from typing import Any

import numpy as np

from .vllm_observer import zeros_like_output

ROTATE = "apply_rotary_pos_emb"
# and DeepSeek-style MLA's, which de-interleaves as it rotates (Mistral 4, Youtu)
ROTATIONS = (ROTATE, "apply_rotary_pos_emb_interleave")
PREFILL = 8


def is_hf_backend(model: Any) -> bool:
    module = type(model).__module__
    return module.endswith(".transformers") or \
        module.startswith("vllm.model_executor.models.transformers")


def _attentions(model: Any) -> dict[int, Any]:
    """layer index -> the transformers attention module that dispatches to vLLM's op."""
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    out = {}
    for _, module in model.named_modules():
        held = getattr(module, "attn", None)
        if isinstance(held, AttentionLayerBase) and isinstance(getattr(module, "layer_idx", None), int):
            out[module.layer_idx] = module
    return out


def _run(model: Any, attentions: dict[int, Any], tokens: Any,
         positions: Any) -> list[tuple[int, Any, Any, int]]:
    """One forward as vLLM calls it, its attention op stubbed: each call of the modeling
    modules' ``apply_rotary_pos_emb`` as (layer, input q or k, its output, the layout's head
    axis), the layer the attention module that made it."""
    import torch

    seen: list[tuple[int, Any, Any, int]] = []
    current = [-1]
    modules = {sys.modules[type(a).__module__] for a in attentions.values()}
    originals = {(m, name): getattr(m, name) for m in modules for name in ROTATIONS
                 if hasattr(m, name)}

    def recorded(original: Any) -> Any:
        signature = inspect.signature(original)

        def call(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            axis = int(bound.arguments.get("unsqueeze_dim", 1))  # 1: [b, h, s, d]
            for x, y in zip(args[:2], out[:2], strict=True):
                if current[0] >= 0:  # inside a text attention (not a vision tower's)
                    seen.append((current[0], x.detach().clone(), y.detach().clone(), axis))
            return out
        return call

    hooks = [a.register_forward_pre_hook(lambda _m, _a, i=i: current.__setitem__(0, i))
             for i, a in attentions.items()]
    hooks += [a.register_forward_hook(lambda _m, _a, _o: current.__setitem__(0, -1))
              for a in attentions.values()]
    try:
        for (m, name), original in originals.items():
            setattr(m, name, recorded(original))
        for a in attentions.values():
            a.attn.forward = zeros_like_output(a.attn)
        with torch.no_grad(), _forward_context(model):
            model(input_ids=tokens, positions=positions)
    finally:
        for (m, name), original in originals.items():
            setattr(m, name, original)
        for a in attentions.values():
            a.attn.__dict__.pop("forward", None)
        for hook in hooks:
            hook.remove()
    return seen


def _forward_context(model: Any) -> Any:
    """vLLM's forward context, which its fused MoE layers read (no attention metadata: the
    attention op is stubbed)."""
    from vllm.forward_context import set_forward_context

    return set_forward_context(None, model.vllm_config) if hasattr(model, "vllm_config") \
        else contextlib.nullcontext()


def _head_size(attention: Any, width: int) -> int:
    """The head a rotation of ``width`` features belongs to: the attention op's head, except
    under MLA (its rope part is a head of its own: ``qk_rope_head_dim``)."""
    op = getattr(attention, "attn", None)
    if op is None or hasattr(op, "kv_lora_rank"):
        return width
    return int(op.head_size)


def to_heads(x: Any, y: Any, axis: int, size: int) -> tuple[Any, Any]:
    """x and y as [1, heads, tokens, size] float64, a partial rotation's input (its rotated
    part only) padded with zeros to the head size (posenc's partial rope rotates the first
    features and passes the rest through)."""
    import torch

    if axis == 2:  # [b, s, h, d]
        x, y = x.transpose(1, 2), y.transpose(1, 2)
    pad = size - x.shape[-1]
    if pad > 0:
        x, y = (torch.nn.functional.pad(t, (0, pad)) for t in (x, y))
    return x.double().numpy(), y.double().numpy()


def observe(model: Any, config: dict[str, Any], offsets: list[int]) -> dict[str, Any]:
    """The rotations vLLM's Transformers backend computes (``calls`` for
    :func:`.engine_judge.judge`), or ``problem``: why they cannot be observed."""
    import torch

    attentions = _attentions(model)
    if not attentions:
        return {"problem": "vLLM's Transformers backend: no attention module dispatches to "
                           "vLLM's attention op"}
    missing = sorted({type(a).__module__ for a in attentions.values()
                      if not hasattr(sys.modules[type(a).__module__], ROTATE)})
    if missing:
        return {"problem": f"vLLM's Transformers backend: {', '.join(missing)} has no "
                           f"{ROTATE} to observe"}
    vocab = int(config.get("vocab_size") or 256)
    rng = np.random.default_rng(0)
    calls: list[dict[str, Any]] = []
    for phase, start, length in [("prefill at 0", 0, PREFILL),
                                 *((f"decode at {p}", p, 1) for p in offsets)]:
        tokens = torch.tensor(rng.integers(0, vocab, length), dtype=torch.long)
        positions = torch.arange(start, start + length, dtype=torch.long)
        seen = _run(model, attentions, tokens, positions)
        if not seen:
            return {"problem": f"vLLM's Transformers backend: the forward never called "
                              f"{ROTATE} (transformers' attention rotates another way)"}
        for layer, x, y, axis in seen:
            xs, ys = to_heads(x, y, axis, _head_size(attentions.get(layer), x.shape[-1]))
            calls.append({"layer": layer, "phase": phase, "offset": np.array([start]),
                          "dims": xs.shape[-1], "x": xs, "y": ys})
    return {"calls": calls, "held": sorted(attentions)}
