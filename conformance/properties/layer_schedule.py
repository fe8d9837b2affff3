"""Properties of layer schedules: the rows follow the flags and layer types a config lists,
and a pattern or interval repeats with its period."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ..context import Context
from . import register

THETA = 123456.0
LOCAL_THETA = 2500.0


@register("layer_schedule_follows_flags")
def follows_flags(ctx: Context) -> None:
    """For random flags and layer types: SmolLM3 and Llama 4 have rope exactly where
    no_rope_layers is 1 (rope_theta there, 0 elsewhere); Cohere2 exactly on its sliding layers;
    Gemma 3 on every layer, rope_local_base_freq on sliding and rope_theta on full layers."""

    @ctx.given(bits=st.lists(st.integers(0, 1), min_size=1, max_size=24))
    def check(bits: list[int]) -> None:
        flags = np.array(bits)
        types = ["sliding_attention" if b else "full_attention" for b in bits]
        n = len(bits)
        for model in ("smollm3", "llama4_text"):
            config = {"model_type": model, "num_hidden_layers": n, "no_rope_layers": bits,
                      "rope_theta": THETA}
            out = ctx.run({}, config=config)
            ctx.assert_equal(out[:, 0], flags.astype(float), f"{model} has_rope, flags {bits}")
            ctx.assert_equal(out[:, 3], flags * THETA, f"{model} rope_theta, flags {bits}")
        out = ctx.run({}, config={"model_type": "cohere2", "num_hidden_layers": n,
                                  "layer_types": types, "rope_theta": THETA})
        ctx.assert_equal(out[:, 0], flags.astype(float), f"cohere2 has_rope, types {types}")
        ctx.assert_equal(out[:, 1], flags.astype(float), f"cohere2 local, types {types}")
        out = ctx.run({}, config={"model_type": "gemma3_text", "num_hidden_layers": n,
                                  "layer_types": types, "rope_theta": THETA,
                                  "rope_local_base_freq": LOCAL_THETA})
        ctx.assert_equal(out[:, 0], np.ones(n), f"gemma3 has_rope, types {types}")
        ctx.assert_equal(out[:, 3], np.where(flags == 1, LOCAL_THETA, THETA),
                         f"gemma3 rope_theta, types {types}")


@register("layer_schedule_pattern_period")
def pattern_period(ctx: Context) -> None:
    """Without layer types or flags, the schedule repeats with the pattern's period P and
    layer P − 1 is the odd one out: Gemma 3's and Cohere2's full layer, SmolLM3's and
    Llama 4's NoPE layer."""
    models = {"gemma3_text": "sliding_window_pattern", "cohere2": "sliding_window_pattern",
              "smollm3": "no_rope_layer_interval", "llama4_text": "no_rope_layer_interval"}

    @ctx.given(model=st.sampled_from(sorted(models)), period=st.integers(1, 8),
               n=st.integers(1, 40))
    def check(model: str, period: int, n: int) -> None:
        out = ctx.run({}, config={"model_type": model, "num_hidden_layers": n,
                                  models[model]: period})
        if n > period:
            ctx.assert_equal(out[period:], out[:-period], f"{model} rows i and i + {period}")
        column = 1 if model in ("gemma3_text", "cohere2") else 0  # local, or has_rope
        odd = (np.arange(n) + 1) % period == 0
        ctx.assert_equal(out[:, column], (~odd).astype(float),
                         f"{model} column {column} with period {period}")
