"""torch_triton.rope eager against torch.compile on CUDA, case by case (float32): which golden
cases the compiled kernel gets wrong, where (positions, features) and how (NaN or a wrong
rotation). Run with TORCH_LOGS=output_code to keep the generated code for a failing case.

    python benchmarks/gpu/compiled_cases.py [CASE ...]
"""

from __future__ import annotations

import sys

import numpy as np


def main(names: list[str]) -> None:
    import torch

    from posenc import golden, specs
    from posenc.backends import torch_triton as tt
    from posenc.paths import spec_dir

    spec = specs.load_spec_file(spec_dir() / "rope.yaml")
    cases = golden.load(spec).cases
    for name in names or list(cases):
        case = cases[name]
        x = torch.tensor(case.inputs["x"], dtype=torch.float32, device="cuda")
        pos = case.inputs.get("positions")
        pos = None if pos is None else torch.tensor(pos, device="cuda")
        params = case.params

        def call(x, pos, params=params):
            return tt.rope(x, pos, **params)

        torch._dynamo.reset()
        compiled = torch.compile(call, fullgraph=True)
        want = case.output
        for label, fn in (("eager", call), ("compiled", compiled)):
            got = fn(x, pos).double().cpu().numpy()
            err = np.abs(got - want)
            nan = int(np.isnan(got).sum())
            worst = np.unravel_index(np.nanargmax(err), err.shape) if err.size else ()
            print(f"{name:36s} {label:8s} max err {np.nanmax(err):.3e} NaN {nan:5d} "
                  f"worst at {tuple(int(i) for i in worst)}")


if __name__ == "__main__":
    main(sys.argv[1:])
