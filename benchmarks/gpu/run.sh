#!/usr/bin/env bash
# What produced the GPU numbers in benchmarks/README.md, on a machine with an NVIDIA GPU whose
# Python already has torch (with Triton) and JAX (TensorFlow is not there: no TF GPU wheel fits
# the 64 MiB a device call may carry, so TensorFlow on CUDA is not measured).
#
#   bash benchmarks/gpu/run.sh [quick|bench|profile|conformance|tune]
#
# quick (the default) is the one prepared call, under 9 minutes on a 16-core H100 machine:
# the GPU and versions, `posenc bench --device cuda --suite gpu` (copy bandwidth, the bare
# kernel, the public APIs, transformers eager and compiled, Liger and flash-attn's Triton rotary
# where carried), the profile of torch_triton.rope (benchmarks/gpu/profile_rope.py: host and
# device time per call, the profiler trace), then the torch, torch-triton and JAX conformance on
# CUDA in parallel processes, each bounded by LIMIT seconds, merged into gpu-conformance.{json,html}.
# Everything lands in $OUT (default ./gpu-out), at most 8 files (the device tool's limit).
#
# Carried, never committed (.git/info/exclude): .whl/ holds posenc's own wheel and the light
# dependencies the machine lacks (array-api-compat, jsonschema and its deps, liger-kernel);
# .rivals/ holds flash-attn's Triton rotary source (flash_attn/ops/triton/rotary.py with empty
# __init__.py files: no flash-attn wheel matches the machine's torch).
# DRY_RUN=1 prints each step and checks every conformance command line with posenc's own
# parser, running nothing (tests/project/test_gpu_run_script.py does that on CPU).
set -uo pipefail
what=${1:-quick}
ROOT=$(pwd)
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
LIMIT=${LIMIT:-220}              # seconds per conformance process
BENCH_LIMIT=${BENCH_LIMIT:-210}  # seconds for the bench suite
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TF_CPP_MIN_LOG_LEVEL=2
PY=${PYTHON:-python3}
PLANNED=$(mktemp); trap 'rm -f "$PLANNED"' EXIT  # a dry run's conformance command lines

step() {  # step NAME LIMIT CMD...: run CMD from /tmp (the installed posenc, not ./posenc)
    local name=$1 limit=$2; shift 2
    if [ -n "${DRY_RUN:-}" ]; then echo "+ [$name, ${limit}s] $*"; return 0; fi
    (cd /tmp && timeout "$limit" "$@") > "$OUT/$name.log" 2>&1 \
        || echo "$name: exit $? (124: stopped at ${limit}s)" >> "$OUT/status.txt"
}

conformance() {  # conformance NAME ARGS...: one posenc conformance process, JSON report
    local name=$1; shift
    [ -n "${DRY_RUN:-}" ] && printf '%q ' "$@" >> "$PLANNED" && echo >> "$PLANNED"
    step "c-$name" "$LIMIT" "$PY" -m posenc conformance --device cuda -q "$@" \
        --json "$OUT/c-$name.json" &
}

setup() {
    [ -n "${DRY_RUN:-}" ] && return 0
    if [ -d .whl ]; then  # wheels carried to a machine without a package index
        "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
            .whl/*.whl || exit 3
        export PYTHONPATH=/tmp/site
    fi
    [ -d .rivals ] && export PYTHONPATH="$ROOT/.rivals${PYTHONPATH:+:$PYTHONPATH}"
    {
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
        (cd /tmp && "$PY" -c "import torch, triton, jax, posenc, transformers
print('torch', torch.__version__, 'triton', triton.__version__, 'jax', jax.__version__,
      jax.devices(), 'transformers', transformers.__version__, 'posenc', posenc.__file__)")
        nproc
    } 2>&1 | tee "$OUT/summary.txt"
}

bench() {
    step bench "$BENCH_LIMIT" "$PY" -m posenc bench --device cuda --suite gpu \
        --json "$OUT/bench-gpu.json"
    [ -z "${DRY_RUN:-}" ] && grep -E "^\| gpu|^gpu|copy" "$OUT/bench.log" | tail -n 80
}

profile() {
    step profile 90 env OUT="$OUT" "$PY" "$ROOT/benchmarks/gpu/profile_rope.py" 32768
    [ -z "${DRY_RUN:-}" ] && head -n 40 "$OUT/profile.log"
}

conformance_jobs() {
    local k
    for k in 1 2 3 4; do
        conformance "torch-eager-$k" --backend torch --mode eager --shard "$k/4" --workers 2
    done
    conformance torch-triton-eager --backend torch-triton --mode eager --encoding rope
    conformance torch-triton-compiled --backend torch-triton --mode compiled --encoding rope \
        --compiled-cases 4 --max-examples 3
    conformance torch-triton-compiled-cases --backend torch-triton --mode compiled \
        --encoding rope --dtype float32 --only cases --compiled-cases 40
    # pe.RotaryEmbedding on CUDA goes through the kernel (issue 43): its layer group, both modes
    conformance torch-layers-rope-eager --backend torch-layers --mode eager --encoding rope \
        --max-examples 3
    conformance torch-layers-rope-compiled --backend torch-layers --mode compiled \
        --encoding rope --max-examples 3 --compiled-cases 4
    # eager against compiled case by case, with the generated code (benchmarks/gpu/compiled_cases.py)
    step compiled-cases "$LIMIT" env TORCH_LOGS=output_code "$PY" \
        "$ROOT/benchmarks/gpu/compiled_cases.py" near_2_20_llama3 near_2_17 named_llama_3_1_8b \
        llama_head_dim_128 &
    for k in 1 2; do
        conformance "torch-compiled-$k" --backend torch --mode compiled --dtype float32 \
            --compiled-cases 1 --max-examples 3 --shard "$k/2"
        conformance "jax-compiled-$k" --backend jax --mode compiled --compiled-cases 2 \
            --max-examples 5 --shard "$k/2"
        conformance "jax-eager-$k" --backend jax --mode eager --dtype float32 --max-examples 2 \
            --shard "$k/2"
    done
    if [ -n "${DRY_RUN:-}" ]; then  # every planned command line through posenc's parser
        "$PY" -c "import shlex, sys; from posenc.cli import build_parser
for line in open(sys.argv[1]):
    build_parser().parse_args(['conformance', *shlex.split(line), '--device', 'cuda'])" \
            "$PLANNED" || exit 2
        return 0
    fi
    wait
    cat "$OUT/status.txt" 2>/dev/null
    step merge 120 "$PY" -m posenc report merge "$OUT"/c-*.json -o "$OUT/gpu-conformance.json" \
        --html "$OUT/gpu-conformance.html"
    tail -n 40 "$OUT/merge.log"
    for f in "$OUT"/c-*.log; do
        echo "== $f"; grep -E "^conformance:|^failing|^(FAIL|ERROR) " "$f" | head -n 12
    done
}

pack() {  # everything but the headline files into one archive (the 8-file limit)
    [ -n "${DRY_RUN:-}" ] && return 0
    cat "$OUT/status.txt" >> "$OUT/summary.txt" 2>/dev/null
    mkdir -p "$OUT/logs" && mv "$OUT"/*.log "$OUT"/c-*.json "$OUT/status.txt" "$OUT/logs/" 2>/dev/null
    tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -r "$OUT/logs"
    ls -la "$OUT"
}

setup
case "$what" in
    quick) bench; profile; conformance_jobs ;;
    bench) bench ;;
    profile) profile ;;
    conformance) conformance_jobs ;;
    tune) step tune 540 "$PY" "$ROOT/benchmarks/gpu/tune_rotary.py" ;;
    *) echo "unknown step: $what (quick|bench|profile|conformance|tune)" >&2; exit 2 ;;
esac
pack
