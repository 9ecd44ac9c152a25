#!/usr/bin/env bash
# One app worker's CPU per 1,000 streamed tokens at a GPU's token rate, this checkout against
# another (default: main), on a fast stand-in upstream instead of vLLM
# (server/loadtest/chat/fast_upstream.py: vLLM's stream format, one token per chunk with its
# usage, at --tokens-per-s per reply), so the app, not the engine, is what is measured.
#   bash benchmarks/app-cost-fast-upstream.sh OUT_DIR [BASE_REF] [CHATS] [TOKENS_PER_S] [RUNS] [REPLY_TOKENS] [--profile]
# The two apps run in alternating order (bench --app-cost), RUNS bursts each, of CHATS chats
# with REPLY_TOKENS-token replies (default 512; longer ones weigh the tokens more against
# what opening a chat and answering a message cost); both get ERNIE_STREAM_INTERVAL_MAX=1 (vLLM's default interval: the
# app does not ask for grouped tokens). --profile adds one py-spy burst per app (py-spy on
# PATH, e.g. pip install py-spy in a scratch venv): profile-0-* is this checkout, -1- the base.
set -euo pipefail
out=$1 base=${2:-main} chats=${3:-128} rate=${4:-50} runs=${5:-3} reply=${6:-512} profile=${7:-}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
worktree=$root/.cache/app-cost-base
rm -rf "$worktree" && git worktree prune
git worktree add --detach "$worktree" "$base" > /dev/null
port=$(.venv/bin/python -c "from server.stack.processes import free_port; print(free_port())")
.venv/bin/python -m server.loadtest.chat.fast_upstream --port "$port" --tokens-per-s "$rate" &
upstream=$!
trap 'kill $upstream 2>/dev/null; git worktree remove --force "$worktree"' EXIT
until curl -sf "http://127.0.0.1:$port/health" > /dev/null; do sleep 0.2; done
mkdir -p "$out"
./scripts/ernie-chat bench --app-cost --url "http://127.0.0.1:$port" --concurrency "$chats" \
    --output-len "$reply" --repetitions "$runs" --app-env ERNIE_STREAM_INTERVAL_MAX=1 \
    --baseline-root "$worktree" --baseline-env ERNIE_STREAM_INTERVAL_MAX=1 --out "$out" $profile \
    2> "$out/bench-stderr.txt"
