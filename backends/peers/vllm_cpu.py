"""vLLM's CPU kernel path (``forward_cpu``) as its own scoreboard row: ``peer:vllm-cpu``
(:mod:`.vllm` has the adapter; ``peer:vllm`` is ``forward_native``)."""

from __future__ import annotations

from .vllm import CPU_BACKEND as BACKEND

__all__ = ["BACKEND"]
