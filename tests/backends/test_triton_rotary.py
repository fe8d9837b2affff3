"""The fused Triton rotary kernel (posenc.backends.torch_triton).

Without a GPU the kernel runs in Triton's interpreter (``TRITON_INTERPRET=1``, which must be set
before triton is imported, hence the subprocesses). The conformance harness holds it to rope's
goldens and properties, and broken variants of it must fail the same harness. On a CUDA
machine the same checks run on the GPU, compiled too.

Triton is not in the ``test`` extra: on a CPU machine, a process that has imported TensorFlow
or jaxlib aborts when torch.compile then imports triton's native library (seen with triton
3.9, torch 2.13, TensorFlow 2.21). CI installs it into a folder of its own instead and names
it in ``POSENC_TRITON_PATH``; only these subprocesses see it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TRITON_PATH = os.environ.get("POSENC_TRITON_PATH", "")
needs_triton = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None
    or (importlib.util.find_spec("triton") is None and not TRITON_PATH),
    reason="needs torch and triton (pip install 'posenc[triton]', or POSENC_TRITON_PATH)")


def _interpreted(script: str, tmp_path: Path, timeout: float = 300) -> dict:
    out = tmp_path / "result.json"
    env = {**os.environ, "TRITON_INTERPRET": "1", "POSENC_OUT": str(out)}
    if TRITON_PATH:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [TRITON_PATH, env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow
@needs_triton
def test_conformance_in_the_interpreter(tmp_path: Path) -> None:
    """Every rope golden and property, float32 and the 16-bit dtypes, through the kernel."""
    result = _interpreted("""
        import json, os
        from posenc.conformance import Options, run
        from posenc.backends import torch_triton
        assert torch_triton.interpreting()
        results = run(Options(backends=["torch-triton"], encodings=["rope"], modes=["eager"],
                              dtypes=["float32", "bfloat16", "float16"], max_examples=2,
                              gradients=False))
        json.dump({"statuses": [r.status for r in results],
                   "failed": [r.check.id + ": " + r.message for r in results if r.failed]},
                  open(os.environ["POSENC_OUT"], "w"))
        """, tmp_path)
    assert not result["failed"], "\n".join(result["failed"][:5])
    assert result["statuses"].count("pass") >= 100  # cases and properties, three dtypes


@needs_triton
def test_broken_kernels_fail_the_harness(tmp_path: Path) -> None:
    """The kernel launched with the wrong sign, the wrong layout or positions off by one must
    fail rope's goldens: the harness sees through the kernel path. Each mutant's goldens run in
    plan order up to the first failure, which is all the assertion reads (the interpreter makes
    each check, and each diagnosis of a failure, cost seconds)."""
    result = _interpreted("""
        import dataclasses, json, os
        import torch
        from posenc.backends import torch_triton
        from posenc.conformance import Options, Runner

        def mutant(change):
            def rope(x, positions=None, **kw):
                op = torch_triton.prepared(x, positions, **kw)
                positions_, pos_mode, limbs, switch, rd, interleaved, factor = op.args
                args = dict(positions=positions_, pos_mode=pos_mode, limbs=limbs, switch=switch,
                            rotary_dim=rd, interleaved=interleaved, factor=factor, inverse=False)
                change(args)
                if args["positions"] is None and args["pos_mode"] == 1:
                    args["positions"] = torch.arange(x.shape[-2])[None] + 1
                rotary, _ = torch_triton._ops()
                return rotary(x.contiguous(), None, *args.values())[0]
            return dataclasses.replace(torch_triton.BACKEND, name="mutant",
                                       overrides={"rope": rope})

        def off_by_one(a):
            if a["positions"] is not None:
                a["positions"] = a["positions"] + 1
            else:
                a["pos_mode"] = 1

        mutants = {
            "sign": lambda a: a.update(inverse=True),
            "layout": lambda a: a.update(interleaved=not a["interleaved"]),
            "off_by_one": off_by_one,
        }
        caught = {}
        for name, change in mutants.items():
            options = Options(backends=[mutant(change)], encodings=["rope"], modes=["eager"],
                              dtypes=["float32"], properties=False, gradients=False)
            with Runner(options) as runner:
                failed = (runner.execute(check) for check in runner.plan())
                caught[name] = next((r.check.id for r in failed if r.failed), None)
        json.dump(caught, open(os.environ["POSENC_OUT"], "w"))
        """, tmp_path)
    assert len(result) == 3 and all(result.values()), result


@needs_triton
def test_kernel_matches_the_array_api_path(tmp_path: Path) -> None:
    """q and k in one launch (k with fewer heads), in place, strided inputs, partial rotary,
    batched and float positions, LongRoPE's run-time switch, and the backward pass, against
    posenc.rope on the same float32 inputs."""
    result = _interpreted("""
        import json, os
        import torch
        from posenc.backends import torch_triton as tt
        from posenc.encodings.rope import rope
        torch.manual_seed(0)
        err = {}
        def close(name, got, want):
            err[name] = float((got.double() - want.double()).abs().max())

        q, k = torch.randn(2, 8, 5, 64), torch.randn(2, 2, 5, 64)
        pos = torch.tensor([[0, 0, 1, 2, 3], [7, 8, 9, 10, 11]])
        got_q, got_k = tt.rope(q, pos, k=k, rotary_dim=48)
        close("q", got_q, rope(q, pos, rotary_dim=48))
        close("k", got_k, rope(k, pos, rotary_dim=48))
        q2, k2 = q.clone(), k.clone()
        tt.rope(q2, pos, k=k2, rotary_dim=48, inplace=True)
        close("inplace_q", q2, got_q)
        close("inplace_k", k2, got_k)
        strided = torch.randn(2, 5, 8, 64).transpose(1, 2)
        close("strided", tt.rope(strided, layout="interleaved"),
              rope(strided, layout="interleaved"))
        fpos = torch.arange(5, dtype=torch.float64) * 0.75 + 3.25
        close("float_positions", tt.rope(q, fpos), rope(q, fpos))
        longrope = {"rope_type": "longrope", "short_factor": [1.0] * 32,
                    "long_factor": [1.0 + i / 8 for i in range(32)],
                    "original_max_position_embeddings": 4096, "max_position_embeddings": 65536}
        for start in (4090, 4092):  # max + 1 below / above the switch
            p = torch.arange(start, start + 5)
            close(f"longrope_{start}", tt.rope(q, p, scaling=longrope), rope(q, p, scaling=longrope))
        x = torch.randn(2, 3, 5, 64, requires_grad=True)
        g = torch.randn(2, 3, 5, 64)
        (tt.rope(x, pos, rotary_dim=32) * g).sum().backward()
        ref = x.detach().clone().requires_grad_(True)
        (rope(ref, pos, rotary_dim=32) * g).sum().backward()
        close("grad", x.grad, ref.grad)
        json.dump(err, open(os.environ["POSENC_OUT"], "w"))
        """, tmp_path)
    assert set(result) >= {"q", "k", "inplace_q", "strided", "float_positions", "grad"}
    bad = {name: e for name, e in result.items() if not e <= 2e-6}
    assert not bad, bad


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_inplace_refuses_strides_the_kernel_cannot_address() -> None:
    torch = pytest.importorskip("torch")
    from posenc.backends import torch_triton
    from posenc.errors import ParameterError

    x = torch.randn(2, 3, 4, 5, 16)[..., ::2]  # last axis not contiguous
    if x.device.type != "cuda" and not torch_triton.interpreting():
        # on CPU without the interpreter rope() takes the array-API path, which has no such limit
        assert torch_triton.prepared(x) is None
        return
    with pytest.raises(ParameterError, match="strides"):
        torch_triton.rope(x, inplace=True)


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")
def test_gpu_conformance_compiled() -> None:
    """On a CUDA machine: rope's goldens through the kernel under torch.compile."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from posenc.conformance import Options, run

    results = run(Options(backends=["torch-triton"], encodings=["rope"], device="cuda",
                          modes=["eager", "compiled"], dtypes=["float32", "bfloat16"],
                          max_examples=3, compiled_cases=4))
    failed = [f"{r.check.id}: {r.message}" for r in results if r.failed]
    assert not failed, "\n".join(failed[:5])


@needs_triton
def test_one_launch_two_ops_no_host_read_and_the_range_check_in_the_kernel(
        tmp_path: Path) -> None:
    """Issue 19's budget for ``torch_triton.rope``: the kernel launch plus at most two ops (the
    range flag and its device-side assert), no host read; out-of-range positions still raise
    in eager mode, naming the value, and in place leave the tensors untouched."""
    result = _interpreted("""
        import json, os
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        from posenc.backends import torch_triton as tt
        from posenc.errors import ParameterError

        class Count(TorchDispatchMode):
            ops = []
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                self.ops.append(func.overloadpacket.__name__)
                return func(*args, **(kwargs or {}))

        q, k = torch.randn(1, 32, 1, 128), torch.randn(1, 8, 1, 128)
        pos = torch.tensor([[4096]])
        reads = []
        for name in ("item", "tolist", "__bool__", "__int__"):
            original = getattr(torch.Tensor, name)
            setattr(torch.Tensor, name,
                    lambda self, *a, _o=original, _n=name: (reads.append(_n), _o(self, *a))[1])
        from posenc.backends.torch import triton_kernel
        launched, launch = [], triton_kernel.launch
        triton_kernel.launch = lambda run, *a, **kw: (launched.append(run), launch(run, *a, **kw))
        tt.rope(q, pos, base=500000.0, k=k)  # plain eager: the bare kernel, no dispatcher
        direct = [run is triton_kernel.rotary_kernel for run in launched]
        reads.clear()  # the first call may fill caches
        counts = {}
        for label, call in [("decode", lambda: tt.rope(q, pos, base=500000.0, k=k)),
                            ("arange", lambda: tt.rope(q, base=500000.0, k=k)),
                            ("inplace", lambda: tt.rope(q, pos, base=500000.0, k=k,
                                                        inplace=True))]:
            with Count() as c:
                Count.ops = []
                call()
            counts[label] = list(Count.ops)
        hot_reads = list(reads)  # the error path below reads values back to name them
        errors = []
        for bad in ([3, 2**24 + 5], [0.5, float("nan")]):
            for inplace in (False, True):
                q2, k2 = q[:, :, :1].repeat(1, 1, 2, 1), k[:, :, :1].repeat(1, 1, 2, 1)
                before = q2.clone()
                try:
                    tt.rope(q2, torch.tensor(bad), k=k2, inplace=inplace)
                    errors.append(None)
                except ParameterError as exc:
                    errors.append([str(exc), bool(torch.equal(q2, before))])
        json.dump({"counts": counts, "reads": hot_reads, "errors": errors, "direct": direct},
                  open(os.environ["POSENC_OUT"], "w"))
        """, tmp_path)
    decode, arange = result["counts"]["decode"], result["counts"]["arange"]
    assert decode.count("rotary") == 1 and len(decode) <= 3, decode
    assert arange == ["rotary"], arange
    assert result["direct"] == [True]  # one launch, of the bare kernel (under a mode: the op)
    inplace = result["counts"]["inplace"]  # checked on the device first: no host read either
    assert inplace.count("rotary_") == 1 and len(inplace) <= 3, inplace
    assert result["reads"] == []
    assert None not in result["errors"], result["errors"]
    messages = [message for message, _ in result["errors"]]
    assert "16777221" in messages[0] and "16777221" in messages[1], messages
    assert "nan" in messages[2] and "nan" in messages[3], messages
    assert result["errors"][1][1] and result["errors"][3][1]  # in place: untouched


def _calls(graph: str, op: str) -> bool:
    """Whether a printed FX graph calls ``torch.ops.posenc.<op>`` (packet or overload)."""
    return re.search(rf"target=(torch\.ops\.)?posenc\.{op}(\.default)?\]", graph) is not None


@pytest.mark.slow
@needs_triton
def test_compiled_graphs_keep_the_custom_op(tmp_path: Path) -> None:
    """Under torch.compile the kernel is the ``posenc::rotary`` custom op (``rotary_`` in
    place): the graph a backend receives contains it, and the compiled results (a recording
    backend, aot_eager's functionalization, Inductor) are the eager ones, which match a float64
    rotation."""
    result = _interpreted("""
        import json, os
        import numpy as np, torch
        import posenc
        from posenc.backends import torch_triton as tt
        graphs = []
        def record(gm, inputs):
            graphs.append(str(gm.graph))
            return gm.forward
        q, k = torch.randn(1, 4, 8, 16), torch.randn(1, 2, 8, 16)
        pos = torch.tensor([0, 3, 4096, 70000, 1048575, 5, 6, 7])
        def new(q, k, pos):
            return tt.rope(q, pos, base=500000.0, k=k)
        def inplace(q, k, pos):
            return tt.rope(q, pos, base=500000.0, k=k, inplace=True)
        eager = new(q, k, pos)
        same = {}
        for backend in (record, "aot_eager", "inductor"):
            name = backend if isinstance(backend, str) else "record"
            got = torch.compile(new, backend=backend, fullgraph=True)(q, k, pos)
            q2, k2 = q.clone(), k.clone()
            torch.compile(inplace, backend=backend, fullgraph=True)(q2, k2, pos)
            same[name] = [bool(torch.equal(a, b)) for a, b in
                          zip((*got, q2, k2), (*eager, *eager))]
        want = posenc.rope(q.double().numpy(), pos.numpy(), base=500000.0)
        json.dump({"graphs": graphs, "same": same,
                   "error": float(np.abs(eager[0].double().numpy() - want).max())},
                  open(os.environ["POSENC_OUT"], "w"))
        """, tmp_path, timeout=600)
    assert _calls(result["graphs"][0], "rotary"), result["graphs"][0]
    assert _calls(result["graphs"][1], "rotary_"), result["graphs"][1]
    assert all(all(v) for v in result["same"].values()), result["same"]
    assert result["error"] < 1e-6


@needs_triton
def test_rotary_embedding_launches_the_kernel(tmp_path: Path) -> None:
    """``pe.RotaryEmbedding`` on a kernel device (CUDA; here the interpreter): prefill and
    decode, q and k (GQA) in one launch, new tensors, ``out=`` and in place, float32 and
    bfloat16, all matching a float64 rotation; under torch.compile the graph holds the op."""
    result = _interpreted("""
        import json, os
        import numpy as np, torch
        import posenc
        from posenc.backends import torch as pe
        from posenc.backends.torch import triton_kernel
        launched = []
        launch = triton_kernel.launch
        triton_kernel.launch = lambda *a, **kw: (launched.append(1), launch(*a, **kw))
        rot = pe.RotaryEmbedding(32, base=500000.0, max_positions=8192)
        report = {}
        for dtype in (torch.float32, torch.bfloat16):
            for seq, pos in ((12, torch.arange(12) * 600), (1, torch.tensor([4096]))):
                q = torch.randn(1, 8, seq, 32).to(dtype)
                k = torch.randn(1, 2, seq, 32).to(dtype)
                want = [posenc.rope(t.double().numpy(), pos.numpy(), base=500000.0)
                        for t in (q, k)]
                qo, ko, qi, ki = (torch.empty_like(q), torch.empty_like(k), q.clone(),
                                  k.clone())
                calls = {"new": lambda: rot(q, pos, k=k),
                         "out": lambda: rot(q, pos, k=k, out=(qo, ko)),
                         "inplace": lambda: rot(qi, pos, k=ki, inplace=True)}
                for name, call in calls.items():
                    launched.clear()
                    got = call()
                    report[f"{dtype} {seq} {name}"] = [len(launched), max(
                        float(np.abs(g.double().numpy() - w).max()) for g, w in zip(got, want))]
        graphs = []
        def record(gm, inputs):
            graphs.append(str(gm.graph))
            return gm.forward
        q, k = torch.randn(1, 8, 12, 32), torch.randn(1, 2, 12, 32)
        pos = torch.arange(12)
        compiled = torch.compile(lambda q, k, p: rot(q, p, k=k), backend=record,
                                 fullgraph=True)(q, k, pos)
        eager = rot(q, pos, k=k)
        json.dump({"report": report, "graph": graphs[0],
                   "same": [bool(torch.equal(a, b)) for a, b in zip(compiled, eager)]},
                  open(os.environ["POSENC_OUT"], "w"))
        """, tmp_path)
    for name, (launches, error) in result["report"].items():
        assert launches == 1, name
        assert error < (2e-6 if "float32" in name else 2 ** -7 * 4), (name, error)
    assert _calls(result["graph"], "rotary"), result["graph"]
    assert result["same"] == [True, True]
