"""What vLLM's own model code builds for a family, in a forked child of ``posenc sweep vllm``.

The family's shrunk transformers config is saved as a checkpoint folder (config only, its
``architectures`` one vLLM registers), and vLLM builds the model class from it as its model
runner does (``ModelConfig`` reads the folder through its own config code; the
``initialize_model`` of its model loader, no weights, on CPU, a single-process distributed
state). Every ``get_rope`` call made while the model is built is recorded with its
arguments and the prefix of the layer that made it; then each attention layer's rotary
module is applied as vLLM's attention applies it, ``rotary_emb(positions, q, k)`` on the
flattened ``[tokens, heads * head_size]`` layout, on vLLM's CPU path (``forward_cpu``).
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from . import vllm_hub_keys

LAYER = re.compile(r"(?:^|\.)(?:layers|layer|h|blocks|block)\.(\d+)\.")
PREFILL = 8  # positions 0..7
SUBLAYER = re.compile(r"self_attn\.(\d+)\.")  # one of several attentions in a block
HEADS = (2, 1)  # q heads, kv heads of the applied rotation


def architecture(family: Any, config: Any, supported: set[str] | None) -> str | None:
    """The architecture vLLM registers for the family: the config's own ``architectures``,
    else the transformers module's ``*ForCausalLM`` / ``*ForConditionalGeneration`` classes;
    ``supported`` None: the first of those, which vLLM's Transformers backend serves where
    its registry has none (vLLM falls back to it)."""
    import importlib

    names = list(getattr(config, "architectures", None) or [])
    try:
        module = importlib.import_module(f"transformers.models.{family.name}")
        names += sorted(n for n in dir(module)
                        if n.endswith(("ForCausalLM", "ForConditionalGeneration")))
    except ImportError:
        pass
    if supported is None:
        return next((n for n in names if n.endswith("ForCausalLM")), None)
    return next((n for n in names if n in supported), None)


class GetRopeRecorder:
    """``get_rope`` wrapped: each call's arguments, the class it returned and the prefix of
    the module whose constructor called it (read from the caller frames' ``prefix``)."""

    def __init__(self, original: Any) -> None:
        self.original = original
        self.calls: list[dict[str, Any]] = []
        self.hub_keys: dict[str, Any] = {}  # the checkpoint keys added to the saved config

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        module = self.original(*args, **kwargs)
        prefix, frame = "", sys._getframe(1)
        while frame is not None and not prefix:
            value = frame.f_locals.get("prefix")
            prefix = value if isinstance(value, str) and value else ""
            frame = frame.f_back
        names = ("head_size", "max_position", "is_neox_style", "rope_parameters")
        received = {**dict(zip(names, args, strict=False)), **{
            k: v for k, v in kwargs.items() if k != "dtype"}}
        self.calls.append({"prefix": prefix, "args": _plain(received),
                           "module": type(module).__name__})
        return module


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value if isinstance(value, (int, float, str, bool, type(None))) else repr(value)


def patch_get_rope() -> GetRopeRecorder:
    """Record ``get_rope`` wherever vLLM's model modules imported it by name."""
    from vllm.model_executor.layers import rotary_embedding

    recorder = GetRopeRecorder(rotary_embedding.get_rope)
    rotary_embedding.get_rope = recorder
    for name, module in list(sys.modules.items()):
        if name.startswith("vllm.model_executor.models") and \
                getattr(module, "get_rope", None) is recorder.original:
            module.get_rope = recorder
    return recorder


def build(arch: str, config: Any, loaded: Any = None) -> tuple[Any, GetRopeRecorder, int]:
    """vLLM's model for ``config`` (a transformers config object) under ``arch``, the
    recorder of its ``get_rope`` calls and the longest sequence vLLM serves for it
    (``max_model_len``: a request past it is refused, so positions past it never reach the
    rotary)."""
    from vllm.config import DeviceConfig, LoadConfig, ModelConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.model_executor.model_loader.utils import (
        get_model_architecture,
        initialize_model,
        process_weights_after_loading,
    )

    folder = Path(tempfile.mkdtemp(prefix="posenc-vllm-"))
    config.architectures = [arch]
    config.save_pretrained(folder)
    hub_keys = vllm_hub_keys.add(folder / "config.json")
    model_config = ModelConfig(model=str(folder), tokenizer=str(folder), skip_tokenizer_init=True,
                               dtype="float32", enforce_eager=True, trust_remote_code=False)
    if loaded is not None:  # fields the config classes drop on load (vllm_composite.FIELDS)
        loaded(model_config.hf_config)
    vllm_config = VllmConfig(model_config=model_config,
                             load_config=LoadConfig(load_format="dummy"),
                             device_config=DeviceConfig("cpu"))
    with set_current_vllm_config(vllm_config):
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method=f"file://{folder}/dist")
        initialize_model_parallel(1, 1)
        model_class, _ = get_model_architecture(model_config)
        recorder = patch_get_rope()
        recorder.hub_keys = hub_keys
        model = initialize_model(vllm_config, model_class=model_class)
        random_weights(model)
        try:  # what the loader does once weights are in (the CPU linear layers' kernels)
            import torch

            process_weights_after_loading(model, model_config, torch.device("cpu"))
        except Exception:  # the rotary needs none of it; the forward check says so
            pass
    return model, recorder, int(model_config.max_model_len)


def random_weights(model: Any) -> None:
    """Seeded weights in place of the unloaded (uninitialised) ones, before the CPU linear
    layers pack them: a forward's q and k of a sane size. Buffers (transformers'
    ``inv_freq``) are left as the model built them."""
    import torch

    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point() and p.numel():
                p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float32) * 0.2)


def rotary_modules(model: Any) -> dict[int, tuple[str, Any]]:
    """layer index -> (name, the rotary module its attention holds)."""
    from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbeddingBase

    out: dict[int, tuple[str, Any]] = {}
    stacks: set[str] = set()
    found_at: dict[tuple[int, int], tuple[str, Any]] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        if isinstance(module, RotaryEmbeddingBase):
            found = LAYER.search(name + ".")
            if found and "visual" not in name and "vision" not in name:
                within = SUBLAYER.match(name[found.end():])
                found_at.setdefault((int(found.group(1)), int(within.group(1)) if within else 0),
                                    (name, module))
                stacks.add(name[: found.start()])
    # LongCat-Flash: two attentions per block (``self_attn.0``, ``.1``), which transformers
    # numbers as layers 2i and 2i + 1
    per_block = 1 + max((j for _, j in found_at), default=0)
    for (i, j), held in found_at.items():
        out.setdefault(i * per_block + j, held)
    if len(stacks) > 1:  # layers numbered within several stacks (HRM's H and L modules)
        raise LayerNaming(f"its attention layers are numbered within {len(stacks)} stacks "
                          f"({', '.join(sorted(stacks))}): which config layer each is, the "
                          "sweep cannot tell")
    return out


class LayerNaming(ValueError):
    """The model's layer names do not map one to one onto the config's layers."""


def apply(rope: Any, offsets: list[int]) -> list[dict[str, Any]]:
    """``rope(positions, q, k)`` at a prefill of 8 positions and at single decode tokens at
    ``offsets``: q and k each as one call (x, y [1, heads, tokens, head_size] in float64)."""
    import torch

    head = int(rope.head_size)
    rng = np.random.default_rng(0)
    mrope = "MRotary" in type(rope).__name__ or getattr(rope, "mrope_section", None)
    out = []
    for phase, start, length in [("prefill at 0", 0, PREFILL),
                                 *((f"decode at {p}", p, 1) for p in offsets)]:
        positions = torch.arange(start, start + length, dtype=torch.long)
        if mrope:  # text tokens: temporal, height and width positions alike
            positions = positions.expand(3, -1).contiguous()
        q = torch.tensor(rng.standard_normal((length, HEADS[0] * head)), dtype=torch.float32)
        k = torch.tensor(rng.standard_normal((length, HEADS[1] * head)), dtype=torch.float32)
        with torch.no_grad():
            q_out, k_out = rope(positions, q.clone(), k.clone())
        for x, y, heads in ((q, q_out, HEADS[0]), (k, k_out, HEADS[1])):
            shape = (length, heads, head)
            out.append({"phase": phase, "offset": np.array([start]),
                        "dims": int(getattr(rope, "rotary_dim", head)),
                        "x": x.reshape(shape).permute(1, 0, 2)[None].double().numpy(),
                        "y": y.reshape(shape).permute(1, 0, 2)[None].double().numpy()})
    return out


def rotates_in_forward(model: Any, name: str, rope: Any, hidden: int) -> bool | str:
    """Whether the attention holding ``rope`` (at ``name``) calls it in its forward: the
    attention module run on a few tokens with its attention op stubbed (vLLM's needs batch
    metadata; the scores do not matter, only the calls), the rotary's calls counted. A
    string: why the forward could not run."""
    import torch
    from vllm.model_executor.layers.attention.attention import AttentionLayerBase

    from .transformers_observation import last_frame

    attention = model.get_submodule(name.rsplit(".", 1)[0])
    stubs = [m for m in attention.modules() if isinstance(m, AttentionLayerBase)]
    calls: list[int] = []
    forward = rope.forward

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return forward(*args, **kwargs)

    rope.forward = counted
    for stub in stubs:
        stub.forward = zeros_like_output(stub)
    positions = torch.arange(4, dtype=torch.long)
    if "MRotary" in type(rope).__name__ or getattr(rope, "mrope_section", None):
        positions = positions.expand(3, -1).contiguous()
    try:
        with torch.no_grad():
            # Cosmos 3 Edge's layers call forward_with_positions (its forward is NemotronH's,
            # without positions)
            run = getattr(attention, "forward_with_positions", attention)
            run(positions=positions, hidden_states=torch.zeros(4, hidden))
    except Exception as exc:  # another signature, or a model-level input it needs
        return last_frame(exc)
    finally:
        del rope.forward
        for stub in stubs:
            del stub.forward
    return bool(calls)


def zeros_like_output(attention: Any) -> Any:
    """A stand-in for vLLM's attention op: zeros of its output's shape (``[tokens, heads *
    head_size_v]``, which differs from q's where the value heads are narrower, MiMo-V2's;
    a wrong shape corrupts the CPU linear layer after it)."""
    import torch

    def forward(q: Any, *args: Any, output_shape: Any = None, **kwargs: Any) -> Any:
        heads, size_v = getattr(attention, "num_heads", None), getattr(attention, "head_size_v", None)
        if output_shape is None and heads and size_v:
            output_shape = (q.shape[0], heads * size_v)
        return q.new_zeros(output_shape) if output_shape is not None else torch.zeros_like(q)

    return forward
