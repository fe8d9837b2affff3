"""The rivals the bench times posenc against (what a user would otherwise pick), where no
shipped peer adapter (``posenc.backends.peers``) hands them out as the bench calls them:
keras-hub's RotaryEmbedding layer (in a worker that may hide TensorFlow) and the rotary a JAX
user writes by hand. transformers' Llama rotary comes from the shipped adapter
(:func:`posenc.backends.peers.transformers.llama_rotary`)."""

from __future__ import annotations

import sys
from typing import Any

from .rows import BenchContext
from .sizes import BASE


def llama_rotary(ctx: BenchContext, head_dim: int, key: str = "hf-rotary") -> tuple[Any, Any]:
    """transformers' ``LlamaRotaryEmbedding`` on the run's device (made once per ``key``) and
    ``apply_rotary_pos_emb``."""
    from posenc.backends.peers import transformers as hf

    rotary, apply = ctx.memo(key, lambda: hf.llama_rotary(head_dim, BASE, ctx.device))
    return rotary, apply


def jnp_rotary(x: Any, positions: Any, base: float) -> Any:
    """The rotary a JAX user writes by hand: half layout, float32 ``m * inv_freq``."""
    import jax.numpy as jnp

    d = x.shape[-1]
    inv_freq = 1.0 / (base ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
    freqs = positions.astype(jnp.float32)[:, None] * inv_freq[None, :]
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * jnp.cos(emb) + jnp.concatenate([-x2, x1], axis=-1) * jnp.sin(emb)


def import_keras_hub() -> Any:
    try:
        import keras_hub
    except ImportError as exc:
        if exc.name != "tensorflow" or sys.modules.get("tensorflow", 0) is not None:
            raise
        # the keras-jax worker hides TensorFlow (keras-hub only wants it for tf.data helpers,
        # and it costs seconds of start-up); this keras-hub needs it after all
        for name in [n for n in sys.modules if n == "tensorflow" or n.split(".")[0] in
                     ("keras", "keras_hub")]:
            del sys.modules[name]
        import keras_hub
    return keras_hub


def hide_tensorflow() -> None:
    """In the keras-jax worker: keras-hub's import skips TensorFlow (see import_keras_hub)."""
    sys.modules.setdefault("tensorflow", None)  # type: ignore[arg-type]


def keras_rotary(ctx: BenchContext) -> Any:
    RotaryEmbedding = import_keras_hub().layers.RotaryEmbedding

    # [batch, heads, seq, dim]: the sequence is axis 2
    return ctx.memo("keras-rotary", lambda: RotaryEmbedding(max_wavelength=BASE, sequence_axis=2,
                                                            feature_axis=-1))


def keras_version() -> str:
    from importlib.metadata import version

    return f"keras-hub {version('keras-hub')}, keras {version('keras')}"
