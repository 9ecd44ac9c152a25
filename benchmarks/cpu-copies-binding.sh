#!/usr/bin/env bash
# Two engine copies on a CPU: each on cores of its own (the stack's binding) against vLLM's
# own choice (VLLM_CPU_OMP_THREADS_BIND=auto, which binds every copy to the same cores).
#   bash benchmarks/cpu-copies-binding.sh [OUT]   (default /tmp/cpu-copies-binding; about
#                                                  8 minutes on 2 cores)
# Each arm is a `tune` point with ERNIE_ENGINE_COPIES=2 behind HAProxy, as `up` runs it (demo
# model, torch.compile), then 3 runs of 48 requests, 8 at a time, 256-token replies.
# Results: OUT/ARM/output.txt (the table), tune.json (every run).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/cpu-copies-binding}
arm() {  # arm NAME [ENV=VALUE ...]
    local dir=$out/$1; shift
    mkdir -p "$dir"
    env "$@" ./scripts/ernie-chat tune --model demo --device cpu --max-model-len 1024 \
        --kv-cache-gib 0.25 --need-max-model-len 1024 --point "copies 2: engine_copies=2" \
        --repeats 3 --concurrency 8 --num-prompts 48 --input-len 64 --output-len 256 \
        --out "$dir" 2>&1 | grep -v "^\[bench\]" | tee "$dir/output.txt"
}
arm own-cores
arm vllm-auto VLLM_CPU_OMP_THREADS_BIND=auto
