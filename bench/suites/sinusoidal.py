"""absolute: a sinusoidal table, by hand (the PyTorch tutorial's), posenc's, and transformers'
DistilBERT init."""

from __future__ import annotations

import math
from typing import Any

from ..inputs import torch_positions
from ..ours import pe_torch
from ..rows import BenchCase, BenchContext, PlannedRow, Timing
from ..sizes import Sizes


def _planned(n: int, d: int) -> list[PlannedRow]:
    def by_hand(ctx: BenchContext) -> Timing:
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

    def ours(ctx: BenchContext) -> Timing:
        pe = pe_torch()
        pos = torch_positions(ctx, 0, n)
        return Timing(lambda: pe.sinusoidal(pos, d, layout="interleaved", dtype="float32"), "torch",
                      "layout interleaved")

    def distilbert(ctx: BenchContext) -> Timing:
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
        PlannedRow(ref, "hand-written torch sin/cos table", "main", by_hand),
        PlannedRow(f"{p}/posenc", "posenc pe.sinusoidal", "main", ours, ref),
        PlannedRow(f"{p}/transformers-distilbert", "transformers DistilBERT sinusoidal init",
                   "main", distilbert, ref),
    ]


def case(sizes: Sizes) -> BenchCase:
    n, d = sizes.sin_shape
    return BenchCase(f"sinusoidal-{n}x{d}", "absolute", f"sinusoidal table [{n}, {d}] float32",
                     _planned(n, d))
