"""Sweep the Triton rotary kernel's tile shape on a CUDA GPU (bf16, Llama-3-8B q and k).

    python benchmarks/gpu/tune_rotary.py

Prints, per configuration, the median time and the fraction of the device-copy bandwidth at
the shapes of `posenc bench --suite gpu`; the best becomes CONFIG in
backends/torch/triton_kernel.py.
"""

from __future__ import annotations

import itertools

import torch
from triton.testing import do_bench

from posenc.backends import torch_triton as pe
from posenc.backends.torch import triton_kernel as triton_rotary


def main() -> None:
    shapes = ((1, 4096), (1, 32768), (8, 4096))
    configs = [{"block_h": h, "loop": n, "elements": e, "num_warps": w}
               for h, n, e, w in itertools.product((1, 2, 4), (1, 4, 8), (2048, 4096), (4, 8))]
    rows = []
    for batch, seq in shapes:
        q = torch.randn(batch, 32, seq, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(batch, 8, seq, 128, device="cuda", dtype=torch.bfloat16)
        ids = torch.arange(seq, device="cuda")[None].expand(batch, seq).contiguous()
        qo, ko = torch.empty_like(q), torch.empty_like(k)
        nbytes = 2 * (q.numel() + k.numel()) * 2
        copy = do_bench(lambda q=q, k=k, qo=qo, ko=ko: (qo.copy_(q), ko.copy_(k)), warmup=50,
                        rep=300, return_mode="median")
        ref = pe.prepared(q, ids, k=k, base=500000.0)(q, k)
        for config in configs:
            triton_rotary.CONFIG.update(config)
            op = pe.prepared(q, ids, k=k, base=500000.0)
            out = op(q, k)
            same = all(torch.equal(a, b) for a, b in zip(out, ref, strict=True))
            ms = do_bench(lambda op=op, q=q, k=k: op(q, k), warmup=50, rep=300,
                          return_mode="median")
            rows.append((f"{batch}x{seq}", config, ms, copy / ms, same))
            print(f"{batch}x{seq} {config} {ms * 1e3:8.1f} us  {nbytes / ms / 1e6:6.0f} GB/s  "
                  f"{copy / ms:.3f} of copy  {'same' if same else 'DIFFERENT'}", flush=True)
    print("\nbest per shape:")
    for shape in dict.fromkeys(r[0] for r in rows):
        best = max((r for r in rows if r[0] == shape), key=lambda r: r[3])
        print(f"  {shape}: {best[1]} {best[2] * 1e3:.1f} us, {best[3]:.3f} of copy")
    score = {}
    for r in rows:
        score.setdefault(str(r[1]), []).append(r[3])
    top = sorted(score.items(), key=lambda kv: -min(kv[1]))[:5]
    print("best worst-case over shapes:", *(f"\n  {k}: min {min(v):.3f}" for k, v in top))


if __name__ == "__main__":
    main()
