#!/usr/bin/env bash
# What produced the GPU numbers in benchmarks/README.md: posenc's conformance suite on CUDA
# (torch, torch-triton, jax) and `posenc bench --device cuda --suite gpu`, on a machine with an
# NVIDIA GPU whose Python already has torch (with Triton) and JAX. Reports go to $OUT (default
# ./gpu-out). Usage: bash benchmarks/gpu/run.sh [all|conformance|eager|compiled|jax-eager|tune|bench]
set -uo pipefail
what=${1:-all}; shift || true
ROOT=$(pwd)
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TF_CPP_MIN_LOG_LEVEL=2
if [ -d .whl ]; then  # wheels carried to a machine without a package index
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
        .whl/*.whl && export PYTHONPATH=/tmp/site
fi
# flash-attn's Triton rotary (a bench peer) where no flash-attn wheel matches the machine's
# torch: its source file alone, in a package folder .peers/flash_attn/ops/triton/rotary.py
# with empty __init__.py files (not part of posenc; carried, never committed)
[ -d .peers ] && export PYTHONPATH="$ROOT/.peers${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton, jax; print('torch', torch.__version__, 'triton', triton.__version__, 'jax', jax.__version__, jax.devices())" | tee -a "$OUT/gpu.txt"
# the installed posenc, not the checkout's posenc/ folder (python -m puts the cwd first)
# Conformance jobs, in groups that each fit one 10-minute call on a 16-core machine:
#   eager      torch, torch-layers, torch-triton (every dtype) and JAX compiled
#   compiled   torch.compile: torch (first golden case of each spec, 3 examples per property
#              in float32; golden cases only in the 16-bit dtypes) and torch-triton's rope
#   jax-eager  JAX eager, every dtype, sharded by encoding (each new shape compiles each
#              primitive again: one process per dtype did not finish in 300 s)
# `conformance` runs all three. Independent processes share the GPU; each writes its own JSON
# report, merged at the end into gpu-conformance.{json,html}.
a=(--encoding alibi_bias --encoding alibi_slopes --encoding attention --encoding axial_rope
   --encoding combine --encoding complex_order --encoding conv --encoding deberta_bucket
   --encoding deberta_scores)
b=(--encoding fire --encoding floater --encoding hierarchical --encoding kerple
   --encoding learned --encoding mrope --encoding recurrent --encoding rope
   --encoding rope_frequencies)
c=(--encoding shaw_attention --encoding shaw_scores --encoding sinusoidal
   --encoding t5_bias --encoding t5_bucket --encoding transformer_xl --encoding tupe
   --encoding xpos)
run() { local name=$1; shift; timeout "${LIMIT:-540}" bash -c 'cd /tmp && python3 -m posenc conformance --device cuda -q "$@"' _ "$@" --json "$OUT/c-$name.json" > "$OUT/c-$name.log" 2>&1 || echo "$name: exit $?" >> "$OUT/status.txt"; }
eager_jobs() {
    run torch-eager --backend torch --mode eager &
    run torch-layers-eager --backend torch-layers --mode eager --dtype float32 --dtype bfloat16 --max-examples 3 &
    run torch-triton-eager --backend torch-triton --mode eager --encoding rope --max-examples 5 &
    run jax-compiled --backend jax --mode compiled --compiled-cases 2 --max-examples 5 &
}
compiled_jobs() {
    local tc=(--backend torch --mode compiled --compiled-cases 1 --max-examples 3) shard
    for shard in a b c; do
        declare -n enc=$shard
        run "torch-compiled-f32-$shard" "${tc[@]}" --dtype float32 "${enc[@]}" &
        run "torch-compiled-16-$shard" "${tc[@]}" --dtype bfloat16 --dtype float16 --only cases "${enc[@]}" &
    done
    for dtype in float32 bfloat16 float16; do
        run "torch-triton-compiled-$dtype" --backend torch-triton --mode compiled --dtype "$dtype" \
            --encoding rope --compiled-cases 4 --max-examples 3 &
    done
}
jax_eager_jobs() {
    local dtype shard
    for dtype in float64 float32 bfloat16 float16; do
        for shard in a b c; do
            declare -n enc=$shard
            run "jax-eager-$dtype-$shard" --backend jax --mode eager --dtype "$dtype" --max-examples 3 "${enc[@]}" &
        done
    done
}
case "$what" in
    conformance|all) eager_jobs; compiled_jobs; jax_eager_jobs ;;
    eager) eager_jobs ;;
    compiled) compiled_jobs ;;
    jax-eager) jax_eager_jobs ;;
esac
if [ -n "$(jobs -p)" ]; then
    wait
    cat "$OUT/status.txt" 2>/dev/null
    (cd /tmp && python3 -m posenc report merge "$OUT"/c-*.json -o "$OUT/gpu-conformance.json" \
        --html "$OUT/gpu-conformance.html") | tail -n 40
    for f in "$OUT"/c-*.log; do echo "== $f"; grep -E "^conformance:|^failing|^(FAIL|ERROR) " "$f" | head -20; done
    mkdir -p "$OUT/logs" && mv "$OUT"/c-*.log "$OUT"/c-*.json "$OUT/logs/" 2>/dev/null
    tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -r "$OUT/logs"
fi
if [ "$what" = tune ] || [ "$what" = all ]; then
    (cd /tmp && python3 "$ROOT/benchmarks/gpu/tune_rotary.py") 2>&1 | tee "$OUT/tune.log" | tail -n 12
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
    (cd /tmp && python3 -m posenc bench --device cuda --suite gpu --json "$OUT/bench-gpu.json") 2>&1 \
        | tee "$OUT/bench-gpu.log"
    (cd /tmp && timeout 240 python3 "$ROOT/benchmarks/flex_bias_gpu.py") 2>&1 | tee "$OUT/flex-gpu.log"
fi
