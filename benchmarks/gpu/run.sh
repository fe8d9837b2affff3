#!/usr/bin/env bash
# What produced the GPU numbers in benchmarks/README.md: posenc's conformance suite on CUDA
# (torch, torch-triton, jax) and `posenc bench --device cuda --suite gpu`, on a machine with an
# NVIDIA GPU whose Python already has torch (with Triton) and JAX. Reports go to $OUT (default
# ./gpu-out). Usage: bash benchmarks/gpu/run.sh [conformance|bench|all] [extra conformance args]
set -uo pipefail
what=${1:-all}; shift || true
ROOT=$(pwd)
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TF_CPP_MIN_LOG_LEVEL=2
if [ -d .whl ]; then  # wheels carried to a machine without a package index
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
        .whl/*.whl && export PYTHONPATH=/tmp/site
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton, jax; print('torch', torch.__version__, 'triton', triton.__version__, 'jax', jax.__version__, jax.devices())" | tee -a "$OUT/gpu.txt"
# the installed posenc, not the checkout's posenc/ folder (python -m puts the cwd first)
pc() { (cd /tmp && python3 -m posenc conformance --device cuda -q "$@"); }
if [ "$what" = conformance ] || [ "$what" = all ]; then
    # independent processes share the GPU; each writes its own JSON report
    pc --backend torch --mode eager --json "$OUT/torch-eager.json" "$@" > "$OUT/torch-eager.log" 2>&1 &
    pc --backend torch --mode compiled --dtype float32 --json "$OUT/torch-compiled-f32.json" "$@" > "$OUT/torch-compiled-f32.log" 2>&1 &
    pc --backend torch --mode compiled --dtype bfloat16 --dtype float16 --json "$OUT/torch-compiled-16.json" "$@" > "$OUT/torch-compiled-16.log" 2>&1 &
    pc --backend torch-triton --encoding rope --json "$OUT/torch-triton.json" "$@" > "$OUT/torch-triton.log" 2>&1 &
    pc --backend jax --mode eager --json "$OUT/jax-eager.json" "$@" > "$OUT/jax-eager.log" 2>&1 &
    pc --backend jax --mode compiled --json "$OUT/jax-compiled.json" "$@" > "$OUT/jax-compiled.log" 2>&1 &
    wait
    for f in "$OUT"/*.log; do echo "== $f"; grep -E "^conformance:|^failing|^(FAIL|ERROR) " "$f" | head -40; done
fi
if [ "$what" = tune ] || [ "$what" = all ]; then
    (cd /tmp && python3 "$ROOT/benchmarks/gpu/tune_rotary.py") 2>&1 | tee "$OUT/tune.log" | tail -n 12
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
    (cd /tmp && python3 -m posenc bench --device cuda --suite gpu --json "$OUT/bench-gpu.json") 2>&1 \
        | tee "$OUT/bench-gpu.log"
fi
