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
in_len=512; out_len=128  # the comparison's load, for both tools
compare_engine() {  # one engine for both tools, and a warm-up run that is not counted
    python3 -m vllm.entrypoints.openai.api_server --model .gpu/model --load-format dummy \
        --served-model-name ernie --generation-config vllm --port 8000 --max-model-len 2048 \
        --gpu-memory-utilization 0.5 --no-enable-prefix-caching > /tmp/res/compare-engine.log 2>&1 &
    for _ in $(seq 100); do
        python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/v1/models')" 2>/dev/null && break
        sleep 2
    done
    mkdir -p /tmp/res/compare
    echo "warm-up (not counted)"; python3 -m server.cli bench --url http://127.0.0.1:8000 \
        --concurrency 64 --input-len $in_len --output-len $out_len --num-prompts 512 --seed 99 \
        --no-plots --save-prompts --out /tmp/res/warm | tail -n 3
    last_prompts=/tmp/res/warm/prompts.json
}
cpu_trace() {  # cpu_trace PID FILE: the process's CPU ticks (user, system) twice a second
    while [ -e "/proc/$1/stat" ]; do
        echo "$(date +%s.%N) $(awk '{print $14, $15}' "/proc/$1/stat" 2>/dev/null)" >> "$2"; sleep 0.5
    done
}
# Both tools send the same load (in_len, out_len, ignore_eos). vLLM's tool sends the
# prompts our last run sent (`--save-prompts`, in ShareGPT form; more are repeated in its
# own order), so both send the same kind of text; with prefix caching off a repeat costs
# the same as a new prompt.
vllm_tool() {  # vllm_tool IN_FLIGHT PROMPTS SEED: one run of `vllm bench serve`
    python3 -m vllm.entrypoints.cli.main bench serve --backend vllm --model ernie \
        --tokenizer .gpu/model --port 8000 --dataset-name sharegpt --dataset-path "$last_prompts" \
        --sharegpt-output-len $out_len --num-prompts "$2" --max-concurrency "$1" --ignore-eos \
        --percentile-metrics ttft,tpot,itl,e2el --save-result --save-detailed \
        --result-dir /tmp/res/compare --result-filename "vllm-$3.json" --seed "$3" > "/tmp/res/compare/vllm-$3.txt" 2>&1 &
    local pid=$!; cpu_trace $pid "/tmp/res/compare/vllm-$3.cpu"; wait $pid
    grep -E "Request throughput|Mean TTFT" "/tmp/res/compare/vllm-$3.txt" | tr -s ' ' | paste -sd' '
}
ours() {  # ours IN_FLIGHT PROMPTS SEED: one run of our bench; compare afterwards with
          # `ernie-chat bench --plot-only ours-SEED/bench.json --compare-vllm vllm-N.json`
    python3 -m server.cli bench --url http://127.0.0.1:8000 --concurrency "$1" --input-len $in_len \
        --output-len $out_len --num-prompts "$2" --seed "$3" --no-plots --save-prompts \
        --out "/tmp/res/compare/ours-$3" > "/tmp/res/compare/ours-$3.txt" 2>&1
    last_prompts=/tmp/res/compare/ours-$3/prompts.json
    grep -A2 -E "^ conc" "/tmp/res/compare/ours-$3.txt" | tail -n 1
}
pack() { tar -czf "$out/compare.tgz" --exclude=prompts.json -C /tmp/res compare compare-engine.log; }
alternate() {  # alternate ROUNDS IN_FLIGHT PROMPTS SEED: rounds of both tools, vLLM's first in
               # odd ones; its runs get seeds SEED+n, ours SEED+100+n
    for n in $(seq "$1"); do
        (( SECONDS > deadline )) && { echo "stopping before round $n: ${SECONDS}s used"; break; }
        echo "== $2 in flight, round $n (${SECONDS}s)"
        if (( n % 2 )); then vllm_tool "$2" "$3" $(($4 + n)); ours "$2" "$3" $(($4 + 100 + n))
        else ours "$2" "$3" $(($4 + 100 + n)); vllm_tool "$2" "$3" $(($4 + n)); fi
        pack
    done
}
deadline=${COMPARE_DEADLINE_S:-470}
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
  fresh1)  # the goodput table again with prompts that differ (the ones above shared one
           # prompt: the stand-in tokenizer read the corpus as <unk>, the prefix cache served it)
    tune fresh-batch --utilization 0.9 --max-model-len 8192 --max-num-seqs default,128,256 "${load[@]}" ;;
  fresh2)
    tune fresh-seed-8192 --utilization 0.82 --max-model-len 8192 "${load[@]}"
    tune fresh-defaults --utilization 0.9 --max-model-len 131072 "${load[@]}" ;;
  fresh3)
    tune fresh-seed-2048 --utilization 0.85 --max-model-len 2048 "${load[@]}"
    tune fresh-seed-4096 --utilization 0.88 --max-model-len 4096 "${load[@]}" ;;
  compare) # ours against `vllm bench serve` on one engine: a warm-up, then rounds of ~30 s
            # in alternating order; ours sends new prompts every run, vLLM's its last ones
    compare_engine
    alternate "${COMPARE_ROUNDS:-4}" 64 "${COMPARE_PROMPTS:-2880}" 100 ;;
  light)   # a load light enough for either client: 16 in flight, alternating
    compare_engine
    alternate 2 16 1200 300 ;;
  split)   # is a tool held back by its own client at 64 in flight? The same load from two
           # processes of 32 in flight each, for both tools, then one process of 64 each
    compare_engine
    for tool in vllm_tool ours; do
        echo "== $tool: two processes of 32 in flight at once (${SECONDS}s)"
        $tool 32 1440 501 > /tmp/res/compare/split-a.txt & split=$!
        $tool 32 1440 502; wait $split; cat /tmp/res/compare/split-a.txt
        pack
    done
    (( SECONDS > deadline )) || { echo "== 64 in flight, one process each (${SECONDS}s)";
        vllm_tool 64 2880 601; ours 64 2880 701; }
    pack ;;
  eager)   # single-stream decode: CUDA graphs against --enforce-eager
    one=(--concurrency 1 --num-prompts 6 --input-len 128 --output-len 512)
    tune graphs --utilization 0.5 --max-model-len 8192 "${one[@]}"
    ERNIE_ENFORCE_EAGER=true tune eager --utilization 0.5 --max-model-len 8192 "${one[@]}" ;;
esac
tar -czf "$out/$phase.tgz" --exclude=prompts.json -C /tmp/res .
