#!/usr/bin/env bash
# n-gram speculative decoding on the demo model (real, trained weights) on our 2-core CPU:
# how many draft tokens vLLM accepts, and one stream's speed with and without.
#   [VALUES=off,2,4] bash benchmarks/spec-ngram-cpu.sh [OUT]   (default benchmarks/spec-ngram-cpu;
#                                                              about 10 minutes here)
# Two `tune` sweeps over ERNIE_SPECULATIVE_NGRAM. Each point starts vLLM as `up` would (demo
# model, vLLM's torch.compile), sends one unmeasured request, then 3 runs of 8 requests one at
# a time (concurrency 1: one chat user) with 256-token prompts of bench's text: slices of the
# demo corpus, the chat exchanges the model was trained on.
#   chat:        replies end where the model ends them (at most 128 tokens), sampled as the
#                server samples by default (the model's generation_config), as in the chat;
#   greedy-long: temperature 0 and 128-token replies (ignore_eos): text that repeats itself,
#                the case n-gram drafts are made for.
# Acceptance is vLLM's own counters over each run (vllm:spec_decode_num_accepted_tokens_total
# / vllm:spec_decode_num_draft_tokens_total). Results: OUT/SWEEP/output.txt (the table),
# tune.json (every run), tune.png, the engines' logs (gzipped).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-benchmarks/spec-ngram-cpu}
sweep() {  # sweep NAME LOAD-FLAGS...
    local dir=$out/$1; shift
    mkdir -p "$dir"
    ./scripts/ernie-chat tune --model demo --device cpu --max-model-len 1024 --kv-cache-gib 0.25 \
        --need-max-model-len 1024 --vary "speculative_ngram=${VALUES:-off,2,4}" --repeats 3 \
        --concurrency 1 --num-prompts 8 --input-len 256 --output-len 128 "$@" \
        --out "$dir" 2>&1 | grep -v "^\[bench\]" | tee "$dir/output.txt"
    gzip -f "$dir"/point-*-engine.log
}
sweep chat --no-ignore-eos
sweep greedy-long --temperature 0
