"""Let ``posenc sweep vllm`` import vLLM's multimodal model modules on a CPU-only torch.

vLLM's multimodal modules (Qwen2-VL, GLM-4V, ...) import torchvision at module level for
their image processing. The registry's torchvision 0.28.0 (the release paired with torch
2.13) is a CUDA build whose compiled ``_C`` extension does not load beside torch
2.13.0+cpu, and no torchvision source could be had here to build a CPU one (see
docs/engines.md). The sweep's environment therefore installs that release with ``--no-deps``
(peers/sweeps/vllm.txt): torchvision's import catches the failed load of its ``_C`` and goes
on without its compiled ops; its transforms are plain torch code and work; its detection
ops (``nms``, ``roi_align``, ...) raise ("Couldn't load custom C++ ops").

What remains is the one import-time step that needs a compiled op: torchvision registers
fake (meta) kernels for ``torchvision::nms`` and ``torchvision::qnms``, which fails when the
operators do not exist. :func:`allow_import` defines those two schemas, in the sweep's own
process only, with a kernel that raises if anything calls it. A rope sweep never does: it
builds the model class, no image processor runs. vLLM's rotary code is untouched.

:func:`inspect_in_process` makes vLLM's registry inspect a model class in the process that
asks (the sweep's forked child), instead of a fresh ``python -m`` subprocess per class: that
subprocess would import torchvision without the schemas (and costs 10-40 s a class here).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

SCHEMAS = ("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
           "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
_LIBRARY: list[Any] = []  # the torch.library fragment stays alive as long as the process


class TorchvisionOpCalled(RuntimeError):
    """A torchvision detection op was called in the rope sweep, where it has no kernel."""


def without_extension() -> bool:
    """Whether torchvision is installed without a compiled ``_C`` that loads here (none, or
    the registry's CUDA build beside a CPU torch)."""
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.origin:
        return False
    compiled = sorted(Path(spec.origin).parent.glob("_C*.so"))
    if not compiled:
        return True
    import torch

    try:  # what torchvision's own import does first; a loaded extension defines the ops
        torch.ops.load_library(str(compiled[0]))
    except (OSError, RuntimeError):
        return True
    return False


def _absent(*args: Any, **kwargs: Any) -> Any:
    raise TorchvisionOpCalled(
        "torchvision's compiled ops are absent in posenc's vLLM sweep environment (the "
        "schema exists only so that torchvision imports); nothing in a rope sweep calls them")


def allow_import() -> bool:
    """Define ``torchvision::nms`` / ``qnms`` (raising kernels) when torchvision lacks its
    compiled extension and the ops are not defined yet; True when it did."""
    if _LIBRARY or not without_extension():
        return False
    import torch

    if hasattr(torch.ops.torchvision, "nms"):
        return False
    library = torch.library.Library("torchvision", "DEF")
    for schema in SCHEMAS:
        library.define(schema)
        library.impl(schema.split("(", 1)[0], _absent, "CompositeExplicitAutograd")
    _LIBRARY.append(library)
    return True


def inspect_in_process() -> None:
    """vLLM's registry: inspect model classes in this process (see the module text)."""
    from vllm.model_executor.models import registry

    def run_here(fn: Any) -> Any:
        return fn()

    registry._run_in_subprocess = run_here
