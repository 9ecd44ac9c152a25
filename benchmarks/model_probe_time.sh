#!/usr/bin/env bash
# How long vLLM takes from launch to its model's architecture on a first start (its model-class
# probe uncached), with vllm_serve's forked probe (on) and with vLLM's own fresh Python (off):
#     bash benchmarks/model_probe_time.sh on off on off
# Needs .venv-engine and the demo model (.cache/demo-model): `./scripts/up` makes both. Removes
# ~/.cache/vllm/modelinfos before each start; stops each vLLM once the line is there.
# 2026-12-02, this 2-core machine: on 10.1, 10.7, 14.1 s; off 30.2, 21.6, 21.4 s
# (docs/performance.md, "Where a start's time goes").
set -uo pipefail
cd "$(dirname "$0")/.."
for mode in "$@"; do
    rm -rf ~/.cache/vllm/modelinfos; log=$(mktemp)
    pre=""; [ "$mode" = off ] && pre="v.probe_models_in_fork = lambda: False;"
    start=$(date +%s.%N)
    .venv-engine/bin/python -c "import server.stack.vllm_serve as v; $pre v.main(['.cache/demo-model',
        '--served-model-name', 'ernie', '--port', '8124', '--kv-cache-memory-bytes', '300000000',
        '--max-model-len', '1024'])" > "$log" 2>&1 &
    pid=$!
    until grep -q "Resolved architecture" "$log"; do kill -0 $pid 2>/dev/null || break; sleep 0.2; done
    echo "$mode: $(echo "$(date +%s.%N) - $start" | bc) s to the model's architecture"
    kill $pid; wait $pid 2>/dev/null; rm -f "$log"
done
