#!/usr/bin/env bash
# The H200 measurements of docs/gpu-results.md, through the project's own `plan`, `tune`
# and `bench`. Runs on the lent GPU machine after the vLLM bundle is installed
# (../shared/gpu/README.md), from the repo root:  bash benchmarks/gpu/run.sh PHASE
# The model is ERNIE-4.5-0.3B-PT's exact shape with random weights (.gpu/model,
# --load-format dummy): speed and memory are the real model's; the text is not.
set -uo pipefail
phase=$1
out=${OUT:-/tmp/out}; mkdir -p "$out" /tmp/res
export PYTHONPATH=$PWD:/tmp/site VLLM_USE_FLASHINFER_SAMPLER=0 ERNIE_SERVED_MODEL_NAME=ernie
# One chat workload for every point: 1,024-token prompts, 256-token replies, 256 users.
load=(--concurrency 256 --num-prompts 768 --input-len 1024 --output-len 256
      --slo-ttft-ms 1000 --slo-tpot-ms 25)
tune() {  # tune NAME FLAGS...: one sweep, engine stopped after each point
    local name=$1; shift
    python3 -m server.cli tune --model .gpu/model --engine-python python3 --device cuda \
        --engine-args "--load-format dummy" --need-max-model-len 2048 \
        --point-timeout-s 300 --total-timeout-s 560 --out "/tmp/res/$name" "$@" 2>&1 | tail -n 40
}
case $phase in
  sweep)   # what tune picks: max-num-seqs matters most for this small model
    nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv | tee "$out/gpu.csv"
    for u in 0.5 0.7 0.9; do
        python3 -m server.cli plan --model .gpu/model --device cuda --gpu-memory-utilization $u \
            --max-model-len 8192 --json > "/tmp/res/plan-$u.json"
    done
    tune sweep --utilization 0.9 --max-model-len 8192 --max-num-seqs 64,128,256 "${load[@]}" ;;
  seeds)   # the seed articles' three profiles, and vLLM's defaults
    tune seed-2048 --utilization 0.85 --max-model-len 2048 "${load[@]}"
    tune seed-4096 --utilization 0.88 --max-model-len 4096 "${load[@]}"
    tune seed-8192 --utilization 0.82 --max-model-len 8192 "${load[@]}"
    tune defaults --utilization 0.9 --max-model-len 131072 "${load[@]}" ;;
  recheck) # bench's client moved from httpx to asyncio streams: tuned pick and 8192 seed again
    tune recheck-sweep --utilization 0.9 --max-model-len 8192 --max-num-seqs 128,256 "${load[@]}"
    tune recheck-seed-8192 --utilization 0.82 --max-model-len 8192 "${load[@]}" ;;
  repeat)  # the same chat load once more, to see run-to-run spread, plus vLLM's defaults
    tune repeat-seed-8192 --utilization 0.82 --max-model-len 8192 "${load[@]}"
    tune repeat-seqs-256 --utilization 0.9 --max-model-len 8192 --max-num-seqs 256 "${load[@]}"
    tune repeat-defaults --utilization 0.9 --max-model-len 131072 "${load[@]}" ;;
  compare) # ours against `vllm bench serve` on one engine, alternating (a quiet 16-core client)
    python3 -m vllm.entrypoints.openai.api_server --model .gpu/model --load-format dummy \
        --served-model-name ernie --generation-config vllm --port 8000 --max-model-len 2048 \
        --gpu-memory-utilization 0.5 > /tmp/res/compare-engine.log 2>&1 &
    for _ in $(seq 100); do
        python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/v1/models')" 2>/dev/null && break
        sleep 2
    done
    same=(--num-prompts 256 --input-len 512 --output-len 128)
    for n in 1 2; do
        python3 -m vllm.entrypoints.cli.main bench serve --backend vllm --model ernie \
            --tokenizer .gpu/model --port 8000 --dataset-name random --random-input-len 512 \
            --random-output-len 128 --num-prompts 256 --max-concurrency 64 --ignore-eos \
            --percentile-metrics ttft,tpot,itl,e2el --save-result --result-dir "$out" \
            --result-filename "vllm-$n.json" --seed $n 2>&1 | tail -n 4
        python3 -m server.cli bench --url http://127.0.0.1:8000 --concurrency 64 "${same[@]}" \
            --seed $n --no-plots --out "/tmp/res/ours-$n" --compare-vllm "$out/vllm-$n.json" | tail -n 12
        cp "/tmp/res/ours-$n/bench.json" "$out/ours-$n.json"
    done ;;
  eager)   # single-stream decode: CUDA graphs against --enforce-eager
    one=(--concurrency 1 --num-prompts 6 --input-len 128 --output-len 512)
    tune graphs --utilization 0.5 --max-model-len 8192 "${one[@]}"
    ERNIE_ENFORCE_EAGER=true tune eager --utilization 0.5 --max-model-len 8192 "${one[@]}" ;;
esac
tar -czf "$out/$phase.tgz" -C /tmp/res .
