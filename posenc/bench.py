"""``posenc bench``: posenc against the implementations a user would otherwise pick, side by side.

    posenc bench [--suite rope|absolute|bias|all] [--quick] [--threads N] [--json FILE]

Every row of a case runs in the same process on the same inputs (float32, CPU): PyTorch rows
are timed with ``torch.utils.benchmark.Timer.blocked_autorange``, JAX rows with a median loop
over ``block_until_ready``, TensorFlow rows with a median loop that syncs through ``.numpy()``.
keras-hub needs ``KERAS_BACKEND`` before keras is imported, and TensorFlow is best kept out of
a process that has torch, so the TensorFlow and keras rows run in worker subprocesses
(``python -m posenc.bench --worker tf|keras-jax``) that report JSON back. A missing peer gives
a "not installed" row, never a failure. Timings are indicative; nothing here is a test.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUITES = ("rope", "absolute", "bias", "gpu")  # gpu: --device cuda only (posenc/bench_gpu.py)
RUNNERS = ("main", "tf", "keras-jax")
_KERAS_BACKEND = {"tf": "tensorflow", "keras-jax": "jax"}
BASE = 500000.0  # Llama-3 rope_theta


class Missing(Exception):
    """A peer (or a piece of posenc) that is not installed: the row says so."""


@dataclass(frozen=True)
class Sizes:
    seqs: tuple[int, ...]
    q_heads: int
    kv_heads: int
    head_dim: int
    offsets: tuple[int, ...]
    sin_shape: tuple[int, int]
    t5: tuple[int, int, int]  # length, buckets, heads
    alibi: tuple[int, int]  # heads, length
    min_run_time: float


FULL = Sizes(seqs=(4096, 8192), q_heads=32, kv_heads=8, head_dim=128,
             offsets=(4096, 65536, 1048576), sin_shape=(4096, 1024), t5=(1024, 32, 16),
             alibi=(32, 2048), min_run_time=1.0)
QUICK = Sizes(seqs=(64,), q_heads=4, kv_heads=2, head_dim=32, offsets=(4096, 1048576),
              sin_shape=(64, 32), t5=(32, 32, 4), alibi=(4, 32), min_run_time=0.01)


@dataclass
class Timing:
    """What a row's builder returns: the call to time and how to time it."""
    fn: Callable[[], Any]
    kind: str  # "torch" | "jax" | "tf" | "once" | "cuda"
    note: str = ""
    bytes: int = 0  # bytes the operation must read and write (0: no bandwidth column)


@dataclass
class Spec:
    id: str
    label: str
    runner: str
    build: Callable[[Ctx], Timing]
    vs: str | None = None  # id of the row this one's ratio divides by (None: the case's first)


@dataclass
class Case:
    key: str
    suite: str
    title: str
    specs: list[Spec]


@dataclass
class Row:
    id: str
    case: str
    label: str
    runner: str
    vs: str | None
    status: str = "ok"  # ok | not installed | error | skipped
    median_s: float | None = None
    ratio: float | None = None
    detail: str = ""
    note: str = ""
    bandwidth_gbs: float | None = None  # bytes read and written / time, where counted
    of_copy: float | None = None  # fraction of the case's device-copy bandwidth


@dataclass
class Ctx:
    """Run settings plus a per-run cache of inputs shared by the rows of a case."""
    sizes: Sizes
    threads: int | None
    device: str
    cache: dict[Any, Any] = field(default_factory=dict)

    def memo(self, key: Any, make: Callable[[], Any]) -> Any:
        if key not in self.cache:
            self.cache[key] = make()
        return self.cache[key]


# -- timing -----------------------------------------------------------------------------------

def _time_torch(fn: Callable[[], Any], ctx: Ctx) -> float:
    import torch
    import torch.utils.benchmark as benchmark

    with torch.no_grad():
        fn()  # warm-up (caches, allocator)
        timer = benchmark.Timer(stmt="fn()", globals={"fn": fn},
                                num_threads=ctx.threads or torch.get_num_threads())
        return timer.blocked_autorange(min_run_time=ctx.sizes.min_run_time).median


def _time_loop(fn: Callable[[], Any], sync: Callable[[Any], Any], ctx: Ctx,
               min_runs: int = 5) -> float:
    sync(fn())  # compile + warm-up
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_runs or time.perf_counter() - start < ctx.sizes.min_run_time:
        t0 = time.perf_counter()
        sync(fn())
        times.append(time.perf_counter() - t0)
        if len(times) >= 3 and time.perf_counter() - start > 10 * ctx.sizes.min_run_time:
            break  # slow calls: three runs are enough
    return statistics.median(times)


def _jax_sync(out: Any) -> Any:
    import jax

    return jax.block_until_ready(out)


def _tf_sync(out: Any) -> Any:
    first = out[0] if isinstance(out, tuple | list) else out
    return first[(0,) * len(first.shape)].numpy()  # one element: waits for the call, copies nothing


def _measure(timing: Timing, ctx: Ctx) -> float:
    if timing.kind == "torch":
        return _time_torch(timing.fn, ctx)
    if timing.kind == "jax":
        return _time_loop(timing.fn, _jax_sync, ctx)
    if timing.kind == "tf":
        return _time_loop(timing.fn, _tf_sync, ctx)
    if timing.kind == "cuda":
        from .bench_gpu import time_cuda

        return time_cuda(timing.fn)
    if timing.kind == "once":  # a slow one-off (a model's init): one timed call
        t0 = time.perf_counter()
        timing.fn()
        return time.perf_counter() - t0
    raise ValueError(timing.kind)


def _run_spec(spec: Spec, case: Case, ctx: Ctx) -> Row:
    row = Row(id=spec.id, case=case.key, label=spec.label, runner=spec.runner, vs=spec.vs)
    try:
        timing = spec.build(ctx)
        row.note = timing.note
        row.median_s = _measure(timing, ctx)
        if timing.bytes:
            row.bandwidth_gbs = timing.bytes / row.median_s / 1e9
    except Missing as exc:
        row.status, row.detail = "not installed", str(exc)
    except ImportError as exc:
        row.status = "not installed"
        row.detail = f"{exc.name or exc} is not installed"
    except Exception as exc:  # a benchmark reports, it does not crash
        row.status, row.detail = "error", f"{type(exc).__name__}: {exc}"[:300]
    return row


# -- inputs -----------------------------------------------------------------------------------

def _np_qk(ctx: Ctx, seq: int) -> tuple[Any, Any]:
    import numpy as np

    def make() -> tuple[Any, Any]:
        s = ctx.sizes
        rng = np.random.default_rng(seq)
        q = rng.standard_normal((1, s.q_heads, seq, s.head_dim), dtype=np.float32)
        k = rng.standard_normal((1, s.kv_heads, seq, s.head_dim), dtype=np.float32)
        return q, k

    return ctx.memo(("np", seq), make)


def _torch_qk(ctx: Ctx, seq: int) -> tuple[Any, Any]:
    import torch

    q, k = _np_qk(ctx, seq)
    return ctx.memo(("torch", seq), lambda: (torch.from_numpy(q).to(ctx.device),
                                               torch.from_numpy(k).to(ctx.device)))


def _jax_qk(ctx: Ctx, seq: int) -> tuple[Any, Any]:
    import jax.numpy as jnp

    q, k = _np_qk(ctx, seq)
    return ctx.memo(("jax", seq), lambda: (jnp.asarray(q), jnp.asarray(k)))


def _tf_qk(ctx: Ctx, seq: int) -> tuple[Any, Any]:
    import tensorflow as tf

    q, k = _np_qk(ctx, seq)
    return ctx.memo(("tf", seq), lambda: (tf.constant(q), tf.constant(k)))


# -- rotary: PyTorch eager --------------------------------------------------------------------

def _hf_rotary(ctx: Ctx) -> tuple[Any, Any]:
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    def make() -> Any:
        s = ctx.sizes
        config = LlamaConfig(hidden_size=s.q_heads * s.head_dim, num_attention_heads=s.q_heads,
                             num_key_value_heads=s.kv_heads, head_dim=s.head_dim,
                             rope_parameters={"rope_type": "default", "rope_theta": BASE})
        return LlamaRotaryEmbedding(config).to(ctx.device)

    return ctx.memo("hf-rotary", make), apply_rotary_pos_emb


def _pe_torch() -> Any:
    from posenc.backends import torch as pe

    return pe


def _module(ctx: Ctx, table: bool) -> Any:
    pe = _pe_torch()
    if not hasattr(pe, "RotaryEmbedding"):
        raise Missing("posenc.backends.torch.RotaryEmbedding (the module API) is not in this build")
    s = ctx.sizes
    kwargs = {"max_positions": max(s.seqs)} if table else {}
    return ctx.memo(("module", table), lambda: pe.RotaryEmbedding(
        head_dim=s.head_dim, base=BASE, device=ctx.device, **kwargs))


def _torch_positions(ctx: Ctx, start: int, seq: int) -> Any:
    import torch

    return ctx.memo(("pos", start, seq),
                    lambda: torch.arange(start, start + seq, device=ctx.device))


def _rope_torch_specs(seq: int) -> list[Spec]:
    def hf(ctx: Ctx) -> Timing:
        q, k = _torch_qk(ctx, seq)
        rotary, apply = _hf_rotary(ctx)
        ids = _torch_positions(ctx, 0, seq)[None]

        def fn() -> Any:
            cos, sin = rotary(q, ids)
            return apply(q, k, cos, sin)

        return Timing(fn, "torch", "cos/sin from position_ids every call")

    def ret(ctx: Ctx) -> Timing:
        from importlib.metadata import version

        from rotary_embedding_torch import RotaryEmbedding

        q, k = _torch_qk(ctx, seq)
        rot = RotaryEmbedding(dim=ctx.sizes.head_dim, theta=BASE).to(ctx.device)
        return Timing(lambda: (rot.rotate_queries_or_keys(q), rot.rotate_queries_or_keys(k)),
                      "torch", f"v{version('rotary-embedding-torch')}: interleaved pairs, "
                      "float32 m*theta angles cached, cos/sin per call")

    def plain(ctx: Ctx) -> Timing:
        pe = _pe_torch()
        q, k = _torch_qk(ctx, seq)
        pos = _torch_positions(ctx, 0, seq)
        return Timing(lambda: (pe.rope(q, pos, base=BASE), pe.rope(k, pos, base=BASE)), "torch",
                      "exact phases every call, q and k separately")

    def module(ctx: Ctx) -> Timing:
        rot = _module(ctx, table=True)
        q, k = _torch_qk(ctx, seq)
        pos = _torch_positions(ctx, 0, seq)
        return Timing(lambda: rot(q, pos, k=k), "torch", "cos/sin table, q and k in one pass")

    def inplace(ctx: Ctx) -> Timing:
        rot = _module(ctx, table=True)
        q, k = (t.clone() for t in _torch_qk(ctx, seq))  # rotated again and again: norms kept
        pos = _torch_positions(ctx, 0, seq)
        return Timing(lambda: rot(q, pos, k=k, inplace=True), "torch", "overwrites q and k")

    def out(ctx: Ctx) -> Timing:
        import torch

        rot = _module(ctx, table=True)
        q, k = _torch_qk(ctx, seq)
        outs = (torch.empty_like(q), torch.empty_like(k))
        pos = _torch_positions(ctx, 0, seq)
        return Timing(lambda: rot(q, pos, k=k, out=outs), "torch", "preallocated outputs")

    p = f"rope/{seq}/torch"
    ref = f"{p}/transformers"
    return [
        Spec(ref, "transformers Llama rotary + apply_rotary_pos_emb", "main", hf),
        Spec(f"{p}/rotary-embedding-torch", "rotary-embedding-torch rotate_queries_or_keys",
             "main", ret, ref),
        Spec(f"{p}/posenc-rope", "posenc pe.rope (plain API)", "main", plain, ref),
        Spec(f"{p}/posenc-module", "posenc pe.RotaryEmbedding rot(q, pos, k=k)", "main", module, ref),
        Spec(f"{p}/posenc-inplace", "posenc rot(q, pos, k=k, inplace=True)", "main", inplace, ref),
        Spec(f"{p}/posenc-out", "posenc rot(q, pos, k=k, out=(q_out, k_out))", "main", out, ref),
    ]


# -- rotary: JAX / TensorFlow compiled --------------------------------------------------------

def _jnp_rotary(x: Any, positions: Any, base: float) -> Any:
    """The rotary a JAX user writes by hand: half layout, float32 ``m * inv_freq``."""
    import jax.numpy as jnp

    d = x.shape[-1]
    inv_freq = 1.0 / (base ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
    freqs = positions.astype(jnp.float32)[:, None] * inv_freq[None, :]
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * jnp.cos(emb) + jnp.concatenate([-x2, x1], axis=-1) * jnp.sin(emb)


def _jax_fns(ctx: Ctx) -> dict[str, Any]:
    def make() -> dict[str, Any]:
        import jax

        from posenc.backends import jax as pj

        traces: list[int] = []

        def ours(q: Any, k: Any, pos: Any) -> Any:
            traces.append(1)
            return pj.rope(q, pos, base=BASE), pj.rope(k, pos, base=BASE)

        return {"jnp": jax.jit(lambda q, k, pos: (_jnp_rotary(q, pos, BASE),
                                                  _jnp_rotary(k, pos, BASE))),
                "ours": jax.jit(ours), "traces": traces}

    return ctx.memo("jax-fns", make)


def _import_keras_hub() -> Any:
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


def _keras_rotary(ctx: Ctx) -> Any:
    RotaryEmbedding = _import_keras_hub().layers.RotaryEmbedding

    # [batch, heads, seq, dim]: the sequence is axis 2
    return ctx.memo("keras-rotary", lambda: RotaryEmbedding(max_wavelength=BASE, sequence_axis=2,
                                                            feature_axis=-1))


def _keras_version() -> str:
    from importlib.metadata import version

    return f"keras-hub {version('keras-hub')}, keras {version('keras')}"


def _rope_xla_specs(seq: int) -> list[Spec]:
    def jnp_rotary(ctx: Ctx) -> Timing:
        import jax.numpy as jnp

        q, k = _jax_qk(ctx, seq)
        pos = jnp.arange(seq)
        f = _jax_fns(ctx)["jnp"]
        return Timing(lambda: f(q, k, pos), "jax", "x*cos + rotate_half(x)*sin, jax.jit")

    def ours_jax(ctx: Ctx) -> Timing:
        import jax.numpy as jnp

        q, k = _jax_qk(ctx, seq)
        pos = jnp.arange(seq)
        f = _jax_fns(ctx)["ours"]
        return Timing(lambda: f(q, k, pos), "jax", "jax.jit, exact phases")

    def keras_jax(ctx: Ctx) -> Timing:
        import jax

        layer = _keras_rotary(ctx)
        q, k = _jax_qk(ctx, seq)
        f = jax.jit(lambda q, k: (layer(q), layer(k)))
        return Timing(lambda: f(q, k), "jax", f"{_keras_version()}, KERAS_BACKEND=jax, jax.jit")

    def keras_tf(ctx: Ctx) -> Timing:
        import tensorflow as tf

        layer = _keras_rotary(ctx)
        q, k = _tf_qk(ctx, seq)
        f = tf.function(lambda q, k: (layer(q), layer(k)), jit_compile=True)
        return Timing(lambda: f(q, k), "tf",
                      f"{_keras_version()}, KERAS_BACKEND=tensorflow, tf.function XLA")

    def ours_tf(ctx: Ctx) -> Timing:
        import tensorflow as tf

        from posenc.backends import tensorflow as ptf

        q, k = _tf_qk(ctx, seq)
        pos = tf.range(seq)
        f = tf.function(lambda q, k, pos: (ptf.rope(q, pos, base=BASE), ptf.rope(k, pos, base=BASE)),
                        jit_compile=True, autograph=False)
        return Timing(lambda: f(q, k, pos), "tf", "tf.function(jit_compile=True)")

    p = f"rope/{seq}/xla"
    ref, ours = f"{p}/jnp-rotary", f"{p}/posenc-jax"
    return [
        Spec(ref, "hand-written jnp rotary (jit)", "main", jnp_rotary),
        Spec(ours, "posenc posenc.backends.jax.rope (jit)", "main", ours_jax, ref),
        Spec(f"{p}/keras-hub-jax", "keras-hub RotaryEmbedding, JAX backend (jit)", "keras-jax",
             keras_jax, ref),
        Spec(f"{p}/keras-hub-tf", "keras-hub RotaryEmbedding, TF backend (XLA)", "tf", keras_tf, ref),
        Spec(f"{p}/posenc-tf", "posenc posenc.backends.tensorflow.rope (XLA)", "tf", ours_tf, ours),
    ]


# -- decode: one token at a large offset ------------------------------------------------------

def _decode_specs(offset: int) -> list[Spec]:
    def qk(ctx: Ctx) -> tuple[Any, Any]:
        return _torch_qk(ctx, 1)

    def hf(ctx: Ctx) -> Timing:
        q, k = qk(ctx)
        rotary, apply = _hf_rotary(ctx)
        ids = _torch_positions(ctx, offset, 1)[None]

        def fn() -> Any:
            cos, sin = rotary(q, ids)
            return apply(q, k, cos, sin)

        return Timing(fn, "torch", "float32 m*theta (inexact at large offsets)")

    def plain(ctx: Ctx) -> Timing:
        pe = _pe_torch()
        q, k = qk(ctx)
        pos = _torch_positions(ctx, offset, 1)
        return Timing(lambda: (pe.rope(q, pos, base=BASE), pe.rope(k, pos, base=BASE)), "torch")

    def module(ctx: Ctx) -> Timing:
        rot = _module(ctx, table=False)
        q, k = qk(ctx)
        pos = _torch_positions(ctx, offset, 1)
        return Timing(lambda: rot(q, pos, k=k), "torch", "no table: phases per call")

    def jnp_rotary(ctx: Ctx) -> Timing:
        import jax.numpy as jnp

        q, k = _jax_qk(ctx, 1)
        pos = jnp.asarray([offset], dtype=jnp.int32)
        f = _jax_fns(ctx)["jnp"]
        return Timing(lambda: f(q, k, pos), "jax", "jax.jit, float32 m*theta")

    def ours_jax(ctx: Ctx) -> Timing:
        import jax.numpy as jnp

        q, k = _jax_qk(ctx, 1)
        pos = jnp.asarray([offset], dtype=jnp.int32)  # traced: a new offset is not a new trace
        fns = _jax_fns(ctx)
        f, traces = fns["ours"], fns["traces"]
        before = len(traces)
        f(q, k, pos)
        note = "jax.jit, offset a traced array: " + (
            "reuses the compiled call" if len(traces) == before else "first offset, compiles")
        return Timing(lambda: f(q, k, pos), "jax", note)

    p = f"decode/{offset}"
    ref, jref = f"{p}/transformers", f"{p}/jnp-rotary"
    return [
        Spec(ref, "transformers Llama rotary + apply_rotary_pos_emb", "main", hf),
        Spec(f"{p}/posenc-rope", "posenc pe.rope (plain API)", "main", plain, ref),
        Spec(f"{p}/posenc-module", "posenc pe.RotaryEmbedding (no table) rot(q, pos, k=k)", "main",
             module, ref),
        Spec(jref, "hand-written jnp rotary (jit)", "main", jnp_rotary, ref),
        Spec(f"{p}/posenc-jax", "posenc posenc.backends.jax.rope (jit)", "main", ours_jax, jref),
    ]


# -- absolute: sinusoidal table ---------------------------------------------------------------

def _sinusoidal_specs(n: int, d: int) -> list[Spec]:
    def by_hand(ctx: Ctx) -> Timing:
        import torch

        def fn() -> Any:  # the PyTorch tutorial's PositionalEncoding (interleaved sin/cos)
            pos = torch.arange(n, dtype=torch.float32, device=ctx.device)[:, None]
            div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32, device=ctx.device)
                            * (-math.log(10000.0) / d))
            table = torch.empty(n, d, device=ctx.device)
            table[:, 0::2] = torch.sin(pos * div)
            table[:, 1::2] = torch.cos(pos * div)
            return table

        return Timing(fn, "torch", "PyTorch tutorial PositionalEncoding, float32 angles")

    def ours(ctx: Ctx) -> Timing:
        pe = _pe_torch()
        pos = _torch_positions(ctx, 0, n)
        return Timing(lambda: pe.sinusoidal(pos, d, layout="interleaved", dtype="float32"), "torch",
                      "layout interleaved")

    def distilbert(ctx: Ctx) -> Timing:
        import torch
        from transformers.models.distilbert.modeling_distilbert import (
            _create_sinusoidal_embeddings,
        )

        out = torch.empty(n, d)
        return Timing(lambda: _create_sinusoidal_embeddings(n_pos=n, dim=d, out=out), "once",
                      "NumPy float64 list comprehension at model init; one timed call")

    p = f"sinusoidal/{n}x{d}"
    ref = f"{p}/by-hand"
    return [
        Spec(ref, "hand-written torch sin/cos table", "main", by_hand),
        Spec(f"{p}/posenc", "posenc pe.sinusoidal", "main", ours, ref),
        Spec(f"{p}/transformers-distilbert", "transformers DistilBERT sinusoidal init", "main",
             distilbert, ref),
    ]


# -- bias: T5 and ALiBi -----------------------------------------------------------------------

def _t5_specs(length: int, buckets: int, heads: int) -> list[Spec]:
    def hf_attention(ctx: Ctx) -> Any:
        from transformers import T5Config
        from transformers.models.t5.modeling_t5 import T5Attention

        def make() -> Any:
            config = T5Config(num_heads=heads, relative_attention_num_buckets=buckets, d_model=64,
                              d_kv=8, is_decoder=False)
            return T5Attention(config, has_relative_attention_bias=True).to(ctx.device)

        return ctx.memo("t5-attention", make)

    def hf(ctx: Ctx) -> Timing:
        attention = hf_attention(ctx)
        return Timing(lambda: attention.compute_bias(length, length), "torch",
                      "bidirectional, [1, heads, q, k]")

    def ours(ctx: Ctx) -> Timing:
        import torch

        pe = _pe_torch()
        try:
            table = hf_attention(ctx).relative_attention_bias.weight.detach()
        except ImportError:
            table = torch.randn(buckets, heads, device=ctx.device)
        return Timing(lambda: pe.t5_bias(length, length, table, num_buckets=buckets), "torch",
                      "bidirectional, [heads, q, k]")

    p = f"t5/{length}"
    ref = f"{p}/transformers"
    return [
        Spec(ref, "transformers T5Attention.compute_bias", "main", hf),
        Spec(f"{p}/posenc", "posenc pe.t5_bias", "main", ours, ref),
    ]


def _alibi_specs(heads: int, length: int) -> list[Spec]:
    def bloom(ctx: Ctx) -> Timing:
        import torch
        from transformers.models.bloom.modeling_bloom import build_alibi_tensor

        mask = torch.ones(1, length, dtype=torch.long, device=ctx.device)
        return Timing(lambda: build_alibi_tensor(mask, heads, torch.float32), "torch",
                      "key-only [heads, 1, k] from the attention mask")

    def ours(form: str, note: str) -> Callable[[Ctx], Timing]:
        def build(ctx: Ctx) -> Timing:
            pe = _pe_torch()
            return Timing(lambda: pe.alibi_bias(heads, length, length, form=form, dtype="float32",
                                                device=ctx.device), "torch", note)

        return build

    p = f"alibi/{heads}x{length}"
    ref = f"{p}/transformers-bloom"
    return [
        Spec(ref, "transformers BLOOM build_alibi_tensor", "main", bloom),
        Spec(f"{p}/posenc-key-only", 'posenc pe.alibi_bias(form="key_only")', "main",
             ours("key_only", "[heads, 1, k]: same form as BLOOM"), ref),
        Spec(f"{p}/posenc-causal", 'posenc pe.alibi_bias(form="causal")', "main",
             ours("causal", f"[heads, q, k]: {length}x more output than key-only"), ref),
    ]


# -- the plan ---------------------------------------------------------------------------------

def plan(sizes: Sizes, suites: Sequence[str]) -> list[Case]:
    s = sizes
    shape = f"q [1,{s.q_heads},S,{s.head_dim}], k [1,{s.kv_heads},S,{s.head_dim}] float32, " \
            f"base {BASE:g}"
    cases: list[Case] = []
    if "rope" in suites:
        for seq in s.seqs:
            cases.append(Case(f"rope-torch-{seq}", "rope",
                              f"rotary S={seq}, PyTorch eager: {shape}", _rope_torch_specs(seq)))
            cases.append(Case(f"rope-xla-{seq}", "rope",
                              f"rotary S={seq}, JAX / TensorFlow compiled: {shape}",
                              _rope_xla_specs(seq)))
        for offset in s.offsets:
            cases.append(Case(f"decode-{offset}", "rope",
                              f"decode, one token at offset {offset}: q [1,{s.q_heads},1,"
                              f"{s.head_dim}], k [1,{s.kv_heads},1,{s.head_dim}]",
                              _decode_specs(offset)))
    if "absolute" in suites:
        n, d = s.sin_shape
        cases.append(Case(f"sinusoidal-{n}x{d}", "absolute", f"sinusoidal table [{n}, {d}] float32",
                          _sinusoidal_specs(n, d)))
    if "gpu" in suites:
        from . import bench_gpu

        cases += bench_gpu.plan(quick=s is QUICK)
    if "bias" in suites:
        length, buckets, heads = s.t5
        cases.append(Case(f"t5-{length}", "bias", f"T5 bias q = k = {length}, {buckets} buckets, "
                          f"{heads} heads float32", _t5_specs(length, buckets, heads)))
        heads, length = s.alibi
        cases.append(Case(f"alibi-{heads}x{length}", "bias",
                          f"ALiBi bias {heads} heads, {length} x {length} float32",
                          _alibi_specs(heads, length)))
    return cases


# -- running ----------------------------------------------------------------------------------

@contextlib.contextmanager
def _threads(threads: int | None, runner: str) -> Iterator[None]:
    restore: Callable[[], None] = lambda: None  # noqa: E731
    if threads and runner == "main":
        with contextlib.suppress(ImportError):
            import torch

            before = torch.get_num_threads()
            torch.set_num_threads(threads)
            restore = lambda: torch.set_num_threads(before)  # noqa: E731
    elif threads and runner == "tf":  # a fresh worker: before TensorFlow starts its pools
        with contextlib.suppress(ImportError):
            import tensorflow as tf

            tf.config.threading.set_intra_op_parallelism_threads(threads)
    try:
        yield
    finally:
        restore()


def run_rows(cases: list[Case], ctx: Ctx, runner: str, echo: Callable[[str], None] | None = None
             ) -> list[Row]:
    rows = []
    with _threads(ctx.threads, runner):
        for case in cases:
            for spec in case.specs:
                if spec.runner == runner:
                    row = _run_spec(spec, case, ctx)
                    rows.append(row)
                    if echo:
                        echo(f"  {row.id}: " + (f"{row.median_s * 1e3:.3f} ms" if row.median_s
                                                 else f"{row.status} {row.detail}"))
    return rows


@dataclass
class _Worker:
    runner: str
    specs: list[tuple[Case, Spec]]
    proc: subprocess.Popen[str] | None = None
    tmp: tempfile.TemporaryDirectory[str] | None = None

    def start(self, args: argparse.Namespace) -> _Worker:
        if not self.specs:
            return self
        env = {**os.environ, "KERAS_BACKEND": _KERAS_BACKEND[self.runner]}
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        self.tmp = tempfile.TemporaryDirectory()
        cmd = [sys.executable, "-m", "posenc.bench", "--worker", self.runner, "--worker-out",
               str(Path(self.tmp.name) / "rows.json"), "--device", args.device]
        for suite in args.suite:
            cmd += ["--suite", suite]
        if args.quick:
            cmd.append("--quick")
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        return self

    def rows(self, timeout: float) -> list[Row]:
        if self.proc is None or self.tmp is None:
            return []
        try:
            _, stderr = self.proc.communicate(timeout=timeout)
            out = Path(self.tmp.name) / "rows.json"
            if self.proc.returncode == 0 and out.exists():
                return [Row(**r) for r in json.loads(out.read_text())]
            why = f"worker {self.runner} exited {self.proc.returncode}: {stderr.strip()[-300:]}"
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            why = f"worker {self.runner} timed out after {timeout:.0f} s"
        finally:
            self.tmp.cleanup()
        return [Row(id=spec.id, case=case.key, label=spec.label, runner=self.runner, vs=spec.vs,
                    status="error", detail=why) for case, spec in self.specs]


def _workers(cases: list[Case]) -> list[_Worker]:
    return [_Worker(runner, [(c, s) for c in cases for s in c.specs if s.runner == runner])
            for runner in RUNNERS[1:]]


def _fill_ratios(cases: list[Case], rows: dict[str, Row]) -> None:
    for case in cases:
        first = case.specs[0].id
        for spec in case.specs:
            row = rows[spec.id]
            if spec.id == first:
                continue
            row.vs = spec.vs or first
            ref = rows.get(row.vs)
            if row.median_s and ref is not None and ref.median_s:
                row.ratio = row.median_s / ref.median_s
        copy = rows.get(f"{first.rsplit('/', 1)[0]}/copy")
        for spec in case.specs:
            row = rows[spec.id]
            if copy is not None and copy.bandwidth_gbs and row.bandwidth_gbs:
                row.of_copy = row.bandwidth_gbs / copy.bandwidth_gbs


def _fmt_time(seconds: float) -> str:
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def table(cases: list[Case], rows: dict[str, Row]) -> str:
    width = max(len(spec.label) for case in cases for spec in case.specs)
    lines = []
    for case in cases:
        lines.append(f"\n{case.title}")
        for spec in case.specs:
            row = rows[spec.id]
            if row.status != "ok":
                lines.append(f"  {row.label:{width}s}  {row.status}: {row.detail}")
                continue
            if row.vs is None:
                ratio = "reference"
            else:
                ratio = f"{row.ratio:.2f}x" if row.ratio is not None else "-"
                ratio += f" vs {row.vs.rsplit('/', 1)[-1]}"
            note = f"  [{row.note}]" if row.note else ""
            if row.bandwidth_gbs:
                note = f"  {row.bandwidth_gbs:6.0f} GB/s" + (
                    f" = {row.of_copy:4.2f} of copy" if row.of_copy else "") + note
            lines.append(f"  {row.label:{width}s}  {_fmt_time(row.median_s):>10s}  {ratio}{note}")
    return "\n".join(lines)


TARGETS = (  # (row id pattern, target ratio, what): the goals; never asserted
    ("rope/{seq}/torch/posenc-rope", 1.0, "torch plain API <= 1.0x transformers eager"),
    ("rope/{seq}/torch/posenc-inplace", 0.25, "torch in-place <= 0.25x transformers eager"),
    ("rope/{seq}/torch/posenc-out", 0.25, "torch out= <= 0.25x transformers eager"),
    ("rope/{seq}/xla/posenc-jax", 1.15, "JAX jit <= 1.15x the jnp rotary under jit"),
    ("rope/{seq}/xla/posenc-tf", 1.2, "TF XLA <= 1.2x posenc JAX jit"),
)


def targets(sizes: Sizes, rows: dict[str, Row]) -> list[dict[str, Any]]:
    out = []
    for pattern, goal, what in TARGETS:
        for seq in sizes.seqs:
            row = rows.get(pattern.format(seq=seq))
            if row is not None:
                out.append({"id": row.id, "target": goal, "ratio": row.ratio, "what": what,
                            "met": None if row.ratio is None else row.ratio <= goal})
    return out


def gpu_targets(rows: dict[str, Row]) -> list[dict[str, Any]]:
    """The GPU issue's goals: the kernel at >= 85% of copy bandwidth from 16K tokens, and no
    slower than the best installed peer kernel at each shape."""
    out = []
    for key in {r.id.rsplit("/", 1)[0] for r in rows.values() if r.id.startswith("gpu/")}:
        ours = rows.get(f"{key}/posenc-triton-kernel")
        if ours is None or not ours.median_s:
            continue
        batch, seq = (int(n) for n in key.split("/")[1].split("x"))
        if batch * seq >= 16384 and ours.of_copy is not None:
            out.append({"id": ours.id, "what": "kernel >= 0.85 of copy bandwidth (>= 16K tokens)",
                        "target": 0.85, "value": ours.of_copy, "met": ours.of_copy >= 0.85})
        peers = [r for name in ("liger", "flash-attn", "transformers-compiled")
                 if (r := rows.get(f"{key}/{name}")) is not None and r.median_s]
        if peers:
            best = min(peers, key=lambda r: r.median_s)
            value = ours.median_s / best.median_s
            out.append({"id": ours.id, "what": f"<= 1.0x the best peer ({best.id.rsplit('/')[-1]})",
                        "target": 1.0, "value": value, "met": value <= 1.0})
    return sorted(out, key=lambda t: (t["id"], t["what"]))


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for name in ("posenc", "torch", "triton", "transformers", "rotary-embedding-torch",
                 "liger-kernel", "flash-attn", "jax", "jaxlib", "tensorflow", "keras", "keras-hub",
                 "numpy"):
        with contextlib.suppress(PackageNotFoundError):
            out[name] = version(name)
    return out


def run(args: argparse.Namespace, echo: Callable[[str], None] | None = print) -> dict[str, Any]:
    sizes = QUICK if args.quick else FULL
    suites = _suites(args)
    cases = plan(sizes, suites)
    ctx = Ctx(sizes, args.threads, args.device)
    say = echo or (lambda _: None)
    say(f"posenc bench: suites {', '.join(suites)}{' (quick)' if args.quick else ''}, "
        f"device {args.device}, threads {args.threads or 'default'}")
    workers = _workers(cases)
    timeout = 120.0 if args.quick else 600.0
    if args.quick:  # a smoke test: overlap the workers' start-up with the main rows
        for worker in workers:
            worker.start(args)
    found = run_rows(cases, ctx, "main", echo)
    for worker in workers:
        if not args.quick and worker.specs:  # one at a time: timings on a quiet machine
            say(f"  (worker {worker.runner}: KERAS_BACKEND={_KERAS_BACKEND[worker.runner]}, "
                "a subprocess)")
            worker.start(args)
        found += worker.rows(timeout)
    rows = {row.id: row for row in found}
    _fill_ratios(cases, rows)
    threads = args.threads
    if threads is None:
        with contextlib.suppress(ImportError):
            import torch

            threads = torch.get_num_threads()
    meta = {"quick": bool(args.quick), "suites": list(suites), "device": args.device,
            "threads": threads, "cpu_count": os.cpu_count(), "machine": platform.machine(),
            "processor": platform.processor(), "min_run_time_s": sizes.min_run_time,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "versions": _versions(), "sizes": dataclasses.asdict(sizes)}
    report = {"meta": meta,
              "cases": [{"key": c.key, "suite": c.suite, "title": c.title,
                         "rows": [s.id for s in c.specs]} for c in cases],
              "rows": [dataclasses.asdict(rows[s.id]) for c in cases for s in c.specs],
              "targets": targets(sizes, rows), "gpu_targets": gpu_targets(rows)}
    if echo:
        echo(table(cases, rows))
        lines = [f"  {t['what']:45s} {t['id']:34s} "
                 + ("-" if t["ratio"] is None else f"{t['ratio']:.2f}x") for t in report["targets"]]
        lines += [f"  {t['what']:45s} {t['id']:34s} {t['value']:.2f}"
                  for t in report["gpu_targets"]]
        if lines:
            echo("\nissue targets (indicative; benchmarks are never tests):\n" + "\n".join(lines))
        tf_threads = args.threads or "default"
        echo(f"\n(float32; torch threads {meta['threads']}, TensorFlow intra-op threads {tf_threads}, "
             "JAX/XLA its default pool; timings on a busy machine are indicative only; "
             f"{', '.join(f'{k} {v}' for k, v in meta['versions'].items())})")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--suite", action="append", choices=[*SUITES, "all"], default=None,
                        help="rope (rotary + decode), absolute (sinusoidal), bias (T5, ALiBi), gpu "
                             "(rotary kernels on CUDA: needs --device cuda) or all (default; "
                             "gpu included with --device cuda; repeatable)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny shapes and short runs: a smoke test, not a measurement")
    parser.add_argument("--threads", type=int, metavar="N",
                        help="torch and TensorFlow intra-op threads (default: their default)")
    parser.add_argument("--json", metavar="FILE", help="write the rows and metadata as JSON")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="where the PyTorch rows run (cpu, the default; JAX and TF use their "
                             "default device)")


def _suites(args: argparse.Namespace) -> tuple[str, ...]:
    if "all" not in args.suite:
        return tuple(args.suite)
    return tuple(s for s in SUITES if s != "gpu" or args.device == "cuda")


def _normalise(args: argparse.Namespace) -> argparse.Namespace:
    args.suite = args.suite or ["all"]
    return args


def main_args(args: argparse.Namespace) -> int:
    report = run(_normalise(args))
    errors = [r for r in report["rows"] if r["status"] == "error"]
    return 1 if errors else 0


def _worker(args: argparse.Namespace) -> int:
    sizes = QUICK if args.quick else FULL
    cases = plan(sizes, _suites(args))
    if args.worker == "keras-jax":
        sys.modules.setdefault("tensorflow", None)  # see _import_keras_hub
    rows = run_rows(cases, Ctx(sizes, args.threads, args.device), args.worker)
    Path(args.worker_out).write_text(json.dumps([dataclasses.asdict(r) for r in rows]))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m posenc.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    parser.add_argument("--worker", choices=RUNNERS[1:], help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = _normalise(parser.parse_args(argv))
    if args.worker:
        return _worker(args)
    return main_args(args)


if __name__ == "__main__":
    raise SystemExit(main())

