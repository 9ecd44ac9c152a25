#!/usr/bin/env bash
# The whole stack on the lent H200, as a user runs it (`./scripts/up`), then loaded through the
# app and directly: app against direct, engine copies, capacity, and where `up`'s start-up time
# goes, cold and warm (docs/performance.md). From the repo root, there:
#     bash benchmarks/gpu/crowd.sh queue PHASE...     (as run.sh: phases done are remembered)
#
# Getting there (calls back to back: /tmp lasts only while the machine is warm). A call carries
# 64 MiB with the tree, so everything travels in pieces. `bash benchmarks/gpu/prepare.sh` builds
# them all; by hand:
#   here:  bash $GPU_KIT/build_bundle.sh (GPU_KIT: benchmarks/gpu/kit.sh); split vllm_site.tar.xz into .gpu/c1..;
#          bash benchmarks/gpu/app_wheels.sh (.gpu/a1..: NOT stack_env.sh wheels, which built cp311
#          wheels the H200's 3.12 refuses); python $GPU_KIT/make_shape_model.py .gpu/model;
#          HAProxy from Debian 12 with its libraries in .gpu/haproxy.tgz (haproxy.bin, lib/*.so*, a
#          wrapper `haproxy` that sets LD_LIBRARY_PATH; crowd.sh unpacks it to /tmp/haproxy)
#   there: carry .gpu/cN, .gpu/install.sh, .gpu/SHA256SUMS: bash .gpu/install.sh stash   (c1, c2 ...)
#          carry the last cN too: bash .gpu/install.sh                                (unpacks vLLM)
#          carry .gpu/aN, .gpu/stack_env.sh, .gpu/APP_SHA256: bash .gpu/stack_env.sh stash  (a1, a2 ...)
#          carry the last aN with .gpu/haproxy.tgz and .gpu/model: bash .gpu/stack_env.sh setup &&
#          bash benchmarks/gpu/crowd.sh queue PHASE...
#          The tree (untracked files included, counted in 4-KiB blocks) plus a piece must stay under
#          the call's 64 MiB: prepare.sh cuts 14-MiB pieces (.gpu/c1..c7, .gpu/a1..a7; c7's call
#          unpacks, carrying .gpu/haproxy.tgz too; a7's carries .gpu/model and runs setup); lower
#          CHUNK_MB as the tree grows, and keep new results out of the tree until the setup calls are
#          done. py-spy (the static binary of .venv/bin/py-spy, for profile-crowd and burst-profile)
#          travels as .gpu/py-spy in a call of its own (`cp .gpu/py-spy /tmp/py-spy`). Give each call
#          `export PATH=$PWD/.venv/bin:$PATH` (py-spy, the CLI) and make it right after the last: the
#          machine is given back 30 s after a call, and a new one starts bare. The setup calls take
#          5-10 s each.
# The phases behind each folder of 8e59b31:benchmarks/gpu/h200/ (docs/performance-data.md), each
# queue on one lent machine unless a second is named:
#   session-1202   `queue start crowd8 tune-chat tune-stream crowd8-cap` (1,674 s of the 1,800 a
#                  lease gives)
#   session-1202b  `queue crowd-shared stream-opts seeds crowd-2copies`; a fresh machine: `queue first-crowd`
#   session-1202c  `queue profile-crowd cap-2copies stats-off cap-seqs`
#   session-1202d  `queue compile-start stream-compile chat-compile crowd-repeat`
#   session-1202e  `queue fork-start triton-shared crowd-clients`, `queue clients-both`
#   session-1202f  `machine-a/`: `queue fork-start cap-both clients-both` (cap-both cut at its
#                  call's end); `machine-b/`, a fresh machine: `queue fork-start clients-both`,
#                  `fork-start` again; a third machine: `bash benchmarks/gpu/import_cost.sh`
#   session-1202g  `queue fork-start later-source later-bytecode`, `queue cap-both`, `queue
#                  clients-both` (which that once ran `copies-3` after it), on one machine
#   session-1203a  `queue copies-together clients-ab` (the machine's first start the 2 copies')
#   session-1203b  `queue clients-both copies-together` (bursts with the app's and qa-load's clock
#                  stamps: burst_table.py's timeline)
#   session-1203c  `queue workers-ab`;  session-1203d  `queue loop-ab`: both noise (docs/performance.md,
#                  "Bursts: chats that send at the same instant")
#   session-1203e  `queue clients-both triton-shared`: every burst_round samples the machine's CPU by
#                  kind of process (`ernie-chat cpu-during`; burst_table.py prints the burst's first
#                  second), then starts with new compile hashes
#   session-1203f  `queue burst-profile`;  session-1203g  `queue burst-profile-paused`
# The model is ERNIE-4.5-0.3B-PT's exact shape with random weights (--load-format dummy): speed
# and memory are the real model's; the text is not, so replies never end (ignore_eos keeps every
# reply at 256 tokens).
set -uo pipefail
phase=$1
out=${OUT:-/tmp/out}; mkdir -p "$out" /tmp/res
call_s=${CALL_DEADLINE_S:-560}
left() { echo $((call_s - SECONDS)); }
if [ ! -x /tmp/haproxy/haproxy ] && [ -f .gpu/haproxy.tgz ]; then
    mkdir -p /tmp/haproxy && tar -xzf .gpu/haproxy.tgz -C /tmp/haproxy
fi
export PATH=/tmp/haproxy:$PATH PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1
export ERNIE_MODEL=$PWD/.gpu/model ERNIE_EXTRA_ENGINE_ARGS="--load-format dummy" \
       ERNIE_ENABLE_PREFIX_CACHING=false ERNIE_IGNORE_EOS=true ERNIE_MAX_TOKENS=256 \
       ERNIE_MAX_MODEL_LEN=2048 ERNIE_SERVED_MODEL_NAME=ernie
# vLLM 0.26 has no per-request stream_interval: `up` sets the engine-wide one (8) and the app asks
# for none (server/plan/stream_interval.py); before that, this file set ERNIE_STREAM_INTERVAL_MAX=1.
cli() { .venv/bin/python -m server.cli "$@"; }

up_start() {  # up_start NAME [VAR=VALUE ...]: the stack in the background, until its chat URL
    local name=$1; shift
    mkdir -p "/tmp/res/$name"
    env "$@" ERNIE_LOG_FILE="/tmp/res/$name/llm.log" ./scripts/up > "/tmp/res/$name/up.txt" 2>&1 &
    up_pid=$!
    for _ in $(seq 600); do
        grep -q '^Chat: ' "/tmp/res/$name/up.txt" 2>/dev/null && break
        kill -0 $up_pid 2>/dev/null || { echo "up exited:"; tail -n 30 "/tmp/res/$name/up.txt"; return 1; }
        sleep 0.5
    done
    grep -E '^\[(stack|start-up|warm-up|engine)\]|API server|HAProxy' "/tmp/res/$name/up.txt" | grep -v "starting vLLM"
}
up_stop() { kill -TERM $up_pid 2>/dev/null; wait $up_pid 2>/dev/null; }
app_vs_direct() {  # app_vs_direct NAME N: N chats at once through the app, then N straight to vLLM
    local name=$1 n=$2
    echo "--- $n chats through the app (qa-load)"
    local TIMEFORMAT="load client (qa-load): %U s user + %S s system over %R s"
    time cli qa-load --sessions "$n" --timeout-s 240 --json > "/tmp/res/$name/qa-$n.json"
    .venv/bin/python - "/tmp/res/$name/qa-$n.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); s = r["summary"]
# Every complete reply is 256 tokens (ignore_eos); all were sent at once: tokens over the
# time until the last reply ended is the app's generated tokens/s.
last = max((c["total_s"] for c in r["sessions"] if c.get("total_s")), default=None)
print({k: s.get(k) for k in ("sessions", "complete", "lost", "crossed", "errors")},
      "TTFT ms p50/p99 %.0f/%.0f" % (s["ttft_ms"]["median"] or 0, s["ttft_ms"]["p99"] or 0),
      "app tokens/s %.0f" % (256 * s["complete"] / last) if last else "-")
PY
    echo "--- $n requests straight to vLLM (bench), the same lengths"
    direct_burst "$name/direct-$n" "$n"
    # The chat sends temperature 0.7 and top_p 0.9, and top_p costs vLLM a sampling kernel per
    # step; bench above samples as the server does by default. (Added after 2026-12-02.)
    echo "--- $n requests straight to vLLM, sampled as the chat samples"
    direct_burst "$name/direct-topp-$n" "$n" --temperature 0.7 --top-p 0.9
}
direct_burst() {  # direct_burst OUT N [BENCH ARGS...]: N requests at once to vLLM, 40 in / 256 out
    local out=/tmp/res/$1 n=$2; shift 2
    cli bench --concurrency "$n" --num-prompts "$n" --input-len 40 --output-len 256 --warmup 0 \
        "$@" --no-plots --out "$out" > "$out.txt" 2>&1; grep -A3 "^ *conc" "$out.txt" | head -n 4
}
capacity_past_1000() {  # capacity_past_1000 NAME SLACK_S [FROM TO [app|engine]]: within the call's
                        # time, less SLACK_S; the users from 4 client processes (from one, as
                        # before session-1202f/, the ceilings were lower bounds)
    local through=${5:-app}
    echo "--- capacity through the $through, past ${3:-1000} users"
    timeout $(( $(left) - $2 )) .venv/bin/python -m server.cli capacity --through "$through" --start-users "${3:-1000}" \
        --max-users "${4:-2000}" --step-s 15 --ramp-s 5 --think-s 3 --output-len 256 --precision 0.25 \
        --processes 4 --out "/tmp/res/$1/capacity-$through" 2>&1 | tail -n 8
}
caches() {  # caches NAME WHEN: what Triton's, Inductor's and vLLM's compile caches hold (the
            # kernel warm-up's cause: with compile on, Inductor kept Triton's cache per configuration
            # under torch_aot_compile/HASH/inductor_cache/triton until engine_args.triton_cache)
    { echo "$2: triton $(find ~/.triton/cache -type f 2>/dev/null | wc -l) files," \
        "inductor $(find /tmp/torchinductor_"$(id -un)" -type f 2>/dev/null | wc -l) files," \
        "vllm $(du -sm ~/.cache/vllm 2>/dev/null | cut -f1) MB, of which Triton files per configuration" \
        "$(find ~/.cache/vllm/torch_compile_cache -path '*inductor_cache/triton/*' -type f 2>/dev/null | wc -l)"
    } | tee -a "/tmp/res/$1/caches.txt"
}
one_stream() {  # one_stream NAME: 16 requests one after another, 1,024 in / 512 out (tune-stream's load)
    local out=/tmp/res/$1-one-stream
    cli bench --concurrency 1 --num-prompts 16 --input-len 1024 --output-len 512 --no-plots \
        --out "$out" > "$out.txt" 2>&1; grep -A3 "^ *conc" "$out.txt" | head -n 4
}
stream_sampling() {  # stream_sampling NAME: one_stream's load as vLLM's default samples it (temperature 1,
                     # the Gumbel kernels), greedy (temperature 0: no sampling kernels) and as the chat
                     # does (0.7, top-p 0.9: the top-p kernel too): what sampling costs a stream's TPOT
    local name=$1 how out
    for how in "default" "greedy --temperature 0" "chat --temperature 0.7 --top-p 0.9"; do
        set -- $how; out=/tmp/res/$name-stream-$1
        cli bench --concurrency 1 --num-prompts 16 --input-len 1024 --output-len 512 --no-plots \
            "${@:2}" --out "$out" > "$out.txt" 2>&1; echo "$1:"; grep -A3 "^ *conc" "$out.txt" | head -n 4
    done
}
profile_worker() {  # profile_worker DIR [PY-SPY FLAGS]: 64 chats (the workers' connections), then
                    # py-spy on one of the 8 workers (250 Hz, --idle left out: its loop's waits are
                    # not work) while 1,000 chats from 4 qa-load processes open, send and stream
    local d=$1 spy=/tmp/py-spy worker spy_pid; shift; [ -x "$spy" ] || spy=$PWD/.gpu/py-spy
    cli qa-load --sessions 64 --timeout-s 60 --json > "$d/warm-64.json"
    worker=$(pgrep -f 'app.serve run' | head -n 1)
    [ -x "$spy" ] && [ -n "$worker" ] || { echo "no py-spy ($spy) or no app worker"; return 0; }
    "$spy" record --pid "$worker" --rate 250 --duration 60 "$@" --format raw \
        --output "$d/worker-py-spy.txt" > "$d/py-spy.log" 2>&1 & spy_pid=$!
    sleep 1
    cli qa-load --sessions 1000 --processes 4 --timeout-s 120 --json > "$d/app-profiled.json"
    kill -INT $spy_pid 2>/dev/null; wait $spy_pid; tail -n 3 "$d/py-spy.log"
}
each_start() {  # each_start PHASE AFTER "NAME VAR=VALUE..." ...: one start after another while the call
                # has time, each timed to its chat URL, its caches counted, AFTER PHASE/NAME run
                # (one_stream, or true), then stopped
    local phase=$1 after=$2 run start; shift 2
    mkdir -p "/tmp/res/$phase"; caches "$phase" before
    for run in "$@"; do
        set -- $run; (( $(left) > 150 )) || break
        start=$SECONDS; up_start "$phase/$1" "${@:2}" || return 1
        echo "$1: chat URL after $((SECONDS - start)) s"; caches "$phase" "after $1"
        "$after" "$phase/$1"; up_stop
    done
}
summed_metrics() {  # summed_metrics NAME: 8 requests, then vLLM's success counter over its API servers
    local url; url=$(grep -o -m1 'ready at http://[0-9.:]*' "/tmp/res/$1/up.txt" | cut -d' ' -f3)
    local before; before=$(curl -s "$url/metrics" | awk '/^vllm:request_success_total/{s+=$2} END{print s+0}')
    local pids=()  # (a bare `wait` would wait for the stack too)
    for _ in $(seq 8); do curl -s -m 30 "$url/v1/completions" -H 'Content-Type: application/json' \
        -d '{"model":"ernie","prompt":"w5 w6","max_tokens":4}' -o /dev/null & pids+=($!); done
    wait "${pids[@]}"
    echo "$1: vllm:request_success_total $before -> $(curl -s "$url/metrics" \
        | awk '/^vllm:request_success_total/{s+=$2} END{print s+0}') after 8 requests"
}
engine_profile() {  # engine_profile NAME: one stream, the engine core sampled by py-spy meanwhile
    local spy=$PWD/.gpu/py-spy core; core=$(pgrep -f 'VLLM::EngineCore' | head -n 1)
    [ -x "$spy" ] && [ -n "$core" ] || { echo "no py-spy or no engine core process"; return 0; }
    cli bench --concurrency 1 --num-prompts 16 --input-len 1024 --output-len 512 --no-plots \
        --out "/tmp/res/$1/one-stream-profiled" > "/tmp/res/$1/one-stream-profiled.txt" 2>&1 &
    local bench=$!; sleep 4
    # --nonblocking: the engine is not paused per sample, so its step time stays its own;
    # --idle: the main thread's waits (for the GPU, for work) are counted, not left out.
    "$spy" record --pid "$core" --rate 400 --duration 8 --nonblocking --idle --threads --format raw \
        --output "/tmp/res/$1/engine-core.txt" 2>&1 | tail -n 2
    wait $bench; grep -A3 "^ *conc" "/tmp/res/$1/one-stream-profiled.txt" | head -n 4
}
cpu_start() {  # cpu_start OUT: the machine's CPU by kind of process until cpu_stop (is a burst
               # bound by the machine's cores?)
    .venv/bin/python -m server.cli cpu-during "$1.json" > "$1.txt" 2>&1 & cpu_pid=$!
}
cpu_stop() { kill -INT $cpu_pid 2>/dev/null; wait $cpu_pid 2>/dev/null; }
burst_round() {  # burst_round DIR: on the running stack, 64 chats at once through the app and 64
                 # requests straight to vLLM (bench, sampled as the chat samples), then 1,000 of each
                 # from 4 client processes, the workers' usage-log lines of the app's burst kept
    local d=$1 seen; mkdir -p "$d"
    cli qa-load --sessions 64 --timeout-s 60 --json > "$d/app-64.json"
    direct_burst "${d#/tmp/res/}/direct-64" 64 --temperature 0.7 --top-p 0.9
    # (session-1202e/: four qa-load processes of 250 started by hand, app-1..4.json; session-1202e/
    # and -1202f/: four bench processes of 250 started by hand, direct-1..4, each with its own start)
    # The workers' usage log (data/usage.jsonl) has each reply's first token as the app saw it,
    # from its request to vLLM: what is left of the chat's TTFT is the app and the client's.
    seen=$(cat data/usage.jsonl 2>/dev/null | wc -l)
    cpu_start "$d/cpu-app"
    cli qa-load --sessions 1000 --processes 4 --timeout-s 120 --json > "$d/app.json"
    cpu_stop
    tail -n +$((seen + 1)) data/usage.jsonl > "$d/app-usage.jsonl" 2>/dev/null
    cpu_start "$d/cpu-direct"
    direct_burst "${d#/tmp/res/}/direct" 1000 --processes 4 --temperature 0.7 --top-p 0.9
    cpu_stop
    .venv/bin/python - "$d" <<'PY'
import json, statistics, sys
from pathlib import Path
d = Path(sys.argv[1])
def line(name, ms):
    ms = sorted(ms)
    if ms:
        print(f"{name}: {len(ms)} first tokens, TTFT ms p50/p99 {statistics.median(ms):.0f}/{ms[int(0.99 * len(ms))]:.0f}")
def chats(name):
    return (1000 * c["ttft_s"] for c in json.loads((d / name).read_text())["sessions"] if c.get("ttft_s") is not None)
line("app, 64 chats", chats("app-64.json"))
line("app, 4 clients x 250", chats("app.json"))
usage = [json.loads(l) for l in (d / "app-usage.jsonl").read_text().splitlines() if l.strip()]
line("  of which the workers' requests to vLLM", (1000 * u["ttft_s"] for u in usage if u.get("ttft_s") is not None))
PY
}
ab_rounds() {  # ab_rounds PHASE PREPARE VARIANT...: each variant in turn on a stack of its own,
               # burst_round on it; `PREPARE VARIANT` (a function) readies the tree and prints the
               # stack's VAR=VALUE settings. Rounds done are skipped; a round that would not fit in
               # the call returns 3, which the queue leaves to the next call.
    local phase=$1 prepare=$2 round=0 variant d; shift 2
    for variant in "$@"; do
        round=$((round + 1)); d=/tmp/res/$phase/$round-$variant
        [ -f "$d/done" ] && continue
        (( $(left) > 150 )) || return 3
        up_start "$phase/$round-$variant" ERNIE_STREAM_INTERVAL=8 $($prepare "$variant") || return 1
        burst_round "$d" && touch "$d/done"
        up_stop
    done
}
client_variant() {  # the chat's HTTP client: aiohttp (this checkout's) or httpx's pool
    if [ "$1" = httpx ]; then cp .gpu/engine_client_httpx.py app/engine/engine_client.py
    else cp /tmp/engine_client_aiohttp.py app/engine/engine_client.py; fi
    echo ERNIE_APP_WORKERS=8
}
workers_variant() { echo "ERNIE_APP_WORKERS=${1#w}"; }
loop_variant() {  # the workers' loop: asyncio's C tasks (this checkout's app/serve.py) or, as
                  # `chainlit run` has it, nest_asyncio's pure-Python ones
    if [ "$1" = nest ]; then printf 'import sys\nfrom chainlit.cli import cli\nsys.exit(cli())\n' > app/serve.py
    else cp /tmp/serve_c_loop.py app/serve.py; fi
    echo ERNIE_APP_WORKERS=8
}
pack_results() {  # everything measured so far, in pieces the call brings back
    rm -f "$out"/results.tgz.part-*
    tar -czf - -C /tmp/res . | split -b 15M - "$out/results.tgz.part-"
}
cpu_of() { ps -o pid=,comm=,time= -C python3,python,chainlit,haproxy 2>/dev/null | head -n 40; }

if [ "$phase" = queue ]; then
    shift
    for p in "$@"; do
        [ -e "/tmp/res/done-$p" ] && continue
        echo "=== $p (${SECONDS} s into the call, $(left) s left)"
        CALL_DEADLINE_S=$(left) bash "$0" "$p"; rc=$?
        # 3: a tune that its time limit stopped (tune.json keeps the points done): the next call resumes
        [ $rc -eq 3 ] || echo "exit $rc" > "/tmp/res/done-$p"
        pack_results
        (( $(left) > 60 )) || break
    done
    echo "queue: done: $(cd /tmp/res && ls done-* 2>/dev/null | sed 's/done-//' | paste -sd' ')"
    exit 0
fi

case $phase in
  warm)    # a later start (compile cache present): start-up, then the crowd figures again
    start=$SECONDS; up_start warm || exit 1; echo "chat URL after $((SECONDS - start)) s"
    app_vs_direct warm 256
    app_vs_direct warm 1000
    echo "--- capacity through the app"
    cli capacity --through app --start-users 250 --max-users 1000 --step-s 20 --ramp-s 5 \
        --think-s 3 --output-len 256 --precision 0.25 --out /tmp/res/warm/capacity-app 2>&1 | tail -n 12
    up_stop ;;
  cold)    # the first start on a fresh machine (no compile cache), then app vs direct and capacity
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
    start=$SECONDS; up_start cold || exit 1; echo "chat URL after $((SECONDS - start)) s"
    app_vs_direct cold 256
    app_vs_direct cold 1000
    echo "--- capacity through the app"
    cli capacity --through app --start-users 256 --max-users 1000 --step-s 20 --ramp-s 5 \
        --think-s 3 --output-len 256 --precision 0.25 --out /tmp/res/cold/capacity-app | tail -n 12
    up_stop ;;
  copies)  # a later start (compile cache present), two engine copies: the engine tier's ceiling
    start=$SECONDS; up_start copies2 ERNIE_ENGINE_COPIES=2 || exit 1; echo "chat URL after $((SECONDS - start)) s"
    cli bench --concurrency 1024 --num-prompts 3072 --input-len 40 --output-len 256 --warmup 0 \
        --no-plots --out /tmp/res/copies2/direct-sustained > /tmp/res/copies2/direct-sustained.txt 2>&1
    grep -A3 "^ *conc" /tmp/res/copies2/direct-sustained.txt | head -n 4
    app_vs_direct copies2 1000
    echo "--- capacity through the app"
    cli capacity --through app --start-users 500 --max-users 1000 --step-s 20 --ramp-s 5 \
        --think-s 3 --output-len 256 --precision 0.25 --out /tmp/res/copies2/capacity-app 2>&1 | tail -n 6
    echo "--- one stream, 1,024 in / 512 out, 8 requests one after another"
    cli bench --concurrency 1 --num-prompts 8 --input-len 1024 --output-len 512 --no-plots \
        --out /tmp/res/copies2/one-stream > /tmp/res/copies2/one-stream.txt 2>&1
    grep -A3 "^ *conc" /tmp/res/copies2/one-stream.txt | head -n 4
    up_stop ;;
  start)   # where start-up time goes: the first start on a fresh machine and later ones, the engine
           # core forked (ERNIE_ENGINE_PROCESS_START auto); where vLLM's import time goes
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
    for run in "start-cold" "start-warm" "start-warm-1api ERNIE_API_SERVERS=1" \
               "start-warm-spawn ERNIE_ENGINE_PROCESS_START=spawn"; do
        set -- $run; (( $(left) > 150 )) || break
        start=$SECONDS; up_start "$@" || exit 1; echo "$1: chat URL after $((SECONDS - start)) s"
        up_stop
    done
    .venv-engine/bin/python -X importtime -c "import vllm.entrypoints.cli.serve" 2> /tmp/res/importtime.txt
    sort -t'|' -k2 -n -r /tmp/res/importtime.txt | head -n 25 ;;
  failover)  # parts killed under load (docs/architecture.md): 1,000 users on 2 copies, app worker 1
              # killed at 15 s and copy 1's engine core at 25 s; failover-1copy: 200 users on 1 copy,
              # its engine core killed at 15 s (the supervisor restarts it; the replies wait, go on)
    up_start failover-2copies ERNIE_ENGINE_COPIES=2 ERNIE_STREAM_INTERVAL=8 || exit 1
    cli qa-load --users 1000 --turns 4 --think-s 3 --ramp-s 10 --processes 4 --kill worker:1@15 \
        --kill engine:1@25 --reply-timeout-s 240 --no-plots --out /tmp/res/failover-2copies/qa 2>&1 | tail -n 25
    up_stop ;;
  failover-saved)  # failover's kills with login and saved chats (SQLite): a dead worker's replies
                    # are taken over by another worker (app/conversation/in_flight.py)
    export ERNIE_QA_PASSWORD=qa-load-password-4711
    up_start failover-saved ERNIE_ENGINE_COPIES=2 ERNIE_STREAM_INTERVAL=8 \
        ERNIE_USERS="qa:$ERNIE_QA_PASSWORD" ERNIE_CHAT_DB=/tmp/res/failover-saved/chats.db || exit 1
    cli qa-load --login qa --users 1000 --turns 4 --think-s 3 --ramp-s 10 --processes 4 \
        --kill worker:1@15 --kill engine:1@25 --reply-timeout-s 240 --no-plots \
        --out /tmp/res/failover-saved/qa 2>&1 | grep -v "^\[qa-load\] *[0-9]* s " | tail -n 25
    up_stop ;;
  limits)  # one user far over ERNIE_USER_MESSAGES_PER_MIN among 40 (benchmarks/limits/one_over_limit.py):
            # the others' TTFT p50 alone and beside the heavy user, three rounds on one stack
    up_start limits ERNIE_USER_MESSAGES_PER_MIN=10 || exit 1
    for round in 1 2 3; do
        (( $(left) > 120 )) || break
        echo "--- round $round"
        .venv/bin/python benchmarks/limits/one_over_limit.py --users 40 --turns 3 --think-s 5 \
            --ramp-s 10 --out "/tmp/res/limits/round-$round" 2>&1 | tail -n 2
    done
    up_stop ;;
  failover-1copy)  # (see failover); what the supervisor told the chat, every 0.2 s, and the
                   # errors the app showed, with their time (the usage log's lines of the run)
    up_start failover-1copy ERNIE_STREAM_INTERVAL=8 || exit 1
    seen=$(cat data/usage.jsonl 2>/dev/null | wc -l)
    (while :; do echo "$(date +%T.%N) $(cat /tmp/res/failover-1copy/engine-state.json 2>/dev/null)"; sleep 0.2; done) \
        > /tmp/res/failover-1copy/states.txt & watcher=$!
    cli qa-load --users 200 --turns 4 --think-s 3 --ramp-s 10 --processes 2 --kill engine:0@15 \
        --reply-timeout-s 400 --no-plots --out /tmp/res/failover-1copy/qa 2>&1 | tail -n 25
    kill $watcher
    tail -n +$((seen + 1)) data/usage.jsonl 2>/dev/null | grep '"error"' > /tmp/res/failover-1copy/errors.jsonl
    grep -E "restarting|ready" /tmp/res/failover-1copy/up.txt | tail -n 4
    up_stop ;;
  crowd8)  # 8 app workers, vLLM sending 8 tokens per piece (0.26 has no per-request stream_interval)
    up_start crowd8 ERNIE_APP_WORKERS=8 ERNIE_STREAM_INTERVAL=8 || exit 1
    app_vs_direct crowd8 256
    app_vs_direct crowd8 1000
    up_stop ;;
  crowd8-cap)  # the same stack: the app's CPU per token, and capacity, each bounded by the call's time
    up_start crowd8-cap ERNIE_APP_WORKERS=8 ERNIE_STREAM_INTERVAL=8 || exit 1
    echo "--- the app's CPU per 1,000 streamed tokens (a Chainlit process of its own on this engine)"
    timeout $(( $(left) / 3 )) .venv/bin/python -m server.cli bench --app-cost --url http://127.0.0.1:8000 \
        --concurrency 256 --output-len 512 --repetitions 2 --app-env UVICORN_WS_PER_MESSAGE_DEFLATE=false \
        $([ -x .venv/bin/py-spy ] && echo --profile) --out /tmp/res/crowd8-cap/app-cost 2>&1 | tail -n 12
    echo "--- capacity through the app"
    timeout $(( $(left) - 200 )) .venv/bin/python -m server.cli capacity --through app --start-users 625 \
        --max-users 1000 --step-s 15 --ramp-s 5 --think-s 3 --output-len 256 --precision 0.25 \
        --out /tmp/res/crowd8-cap/capacity-app 2>&1 | tail -n 8
    up_stop ;;
  crowd-shared)  # the app asks the engine what it is once per process, not per chat,
                 # and bounds a first message instead of counting it (docs/performance.md,
                 # "The app's cost per chat"); then the app's CPU per token and capacity
                 # past 1,000 users
    up_start crowd-shared ERNIE_APP_WORKERS=8 ERNIE_STREAM_INTERVAL=8 || exit 1
    app_vs_direct crowd-shared 256
    app_vs_direct crowd-shared 1000
    echo "--- the app's CPU per 1,000 streamed tokens (a Chainlit process of its own on this engine)"
    timeout $(( $(left) / 3 )) .venv/bin/python -m server.cli bench --app-cost --url http://127.0.0.1:8000 \
        --concurrency 256 --output-len 512 --repetitions 2 --app-env UVICORN_WS_PER_MESSAGE_DEFLATE=false \
        --out /tmp/res/crowd-shared/app-cost 2>&1 | tail -n 4
    capacity_past_1000 crowd-shared 30
    up_stop ;;
  first-crowd)  # a fresh machine's first start (Triton's cache empty), then a crowd at once: the
                # warm-up's bursts above 64 (server/stack/warmup.py); then capacity past 1,000
    up_start first-crowd ERNIE_APP_WORKERS=8 ERNIE_STREAM_INTERVAL=8 || exit 1
    app_vs_direct first-crowd 256
    app_vs_direct first-crowd 1000
    tar -czf - -C /tmp/res . | split -b 15M - "$out/results.tgz.part-"  # kept if the call runs out
    capacity_past_1000 first-crowd 15
    up_stop ;;
  crowd-2copies)  # the same, with tune's pick for the engine: 2 copies x 4 API servers
    up_start crowd-2copies ERNIE_ENGINE_COPIES=2 ERNIE_APP_WORKERS=8 ERNIE_STREAM_INTERVAL=8 || exit 1
    app_vs_direct crowd-2copies 256
    app_vs_direct crowd-2copies 1000
    up_stop ;;
  profile-crowd)  # a fresh machine's first start (its caches before and
                  # after), the engine core profiled on one stream, then app vs direct, direct
                  # sampled both ways (the app sends no typed parameters: engine_client.stream_reply)
    mkdir -p /tmp/res/profile-crowd; caches profile-crowd before
    up_start profile-crowd ERNIE_APP_WORKERS=8 ERNIE_STREAM_INTERVAL=8 || exit 1
    caches profile-crowd after
    engine_profile profile-crowd
    app_vs_direct profile-crowd 256
    app_vs_direct profile-crowd 1000
    up_stop ;;
  compile-start)  # first on a fresh machine: starts without torch.compile
                  # (ERNIE_TORCH_COMPILE=off), first and later, then the first with it, 1 API server
    each_start "$phase" one_stream "nocompile-first ERNIE_TORCH_COMPILE=off ERNIE_API_SERVERS=1" \
        "nocompile-later ERNIE_TORCH_COMPILE=off ERNIE_API_SERVERS=1" \
        "compile-first ERNIE_TORCH_COMPILE=on ERNIE_API_SERVERS=1" || exit 1 ;;
  crowd-repeat)  # app against direct in 3 rounds at 256 and 1,000 chats: a mean and a spread, not one run
    up_start crowd-repeat ERNIE_APP_WORKERS=8 ERNIE_STREAM_INTERVAL=8 || exit 1
    for round in 1 2 3; do
        (( $(left) > 100 )) || break
        mkdir -p /tmp/res/crowd-repeat/r$round
        app_vs_direct crowd-repeat/r$round 256; app_vs_direct crowd-repeat/r$round 1000
    done
    up_stop ;;
  fork-start)  # first on a fresh machine: the defaults (4 API servers), the
               # first start, then later ones with the API servers forked (vllm_serve, now auto on
               # a GPU) and spawned as vLLM does; their metrics must still add up over the servers
    # (named "later-fork", "later-spawn ...", "later-fork-2" in session-1202e/ and session-1202f/:
    # on a fresh machine the first of them is its first start)
    each_start "$phase" summed_metrics "first-fork" "later-spawn ERNIE_ENGINE_PROCESS_START=spawn" \
        "later-fork" || exit 1 ;;
  triton-shared)  # a new compile hash under Triton's one cache (engine_args.triton_cache).
                  # fork-start's starts keep the hash; these change --max-num-batched-tokens,
                  # which is in vLLM's compile hash: torch.compile runs again, but vLLM's own kernels
                  # (the 12-17 s warm-up) should come from ~/.triton/cache; the first hash started twice
    # (each start then runs stream_sampling: 3 stacks, so 3 runs of each way of sampling)
    each_start "$phase" stream_sampling "tokens-4096 ERNIE_MAX_NUM_BATCHED_TOKENS=4096" \
        "tokens-4096-again ERNIE_MAX_NUM_BATCHED_TOKENS=4096" \
        "tokens-12288 ERNIE_MAX_NUM_BATCHED_TOKENS=12288" || exit 1 ;;
  cap-both)  # app against direct as a sustained load, not a burst: capacity
             # straight to vLLM, then through the app, the same users and objective (1 copy)
    up_start cap-both ERNIE_APP_WORKERS=8 ERNIE_STREAM_INTERVAL=8 || exit 1
    whole=$call_s; call_s=$(( SECONDS + ($(left) - 30) / 2 ))  # the first search gets half the time
    capacity_past_1000 cap-both 0 1000 2000 engine
    call_s=$whole; capacity_past_1000 cap-both 20 1000 2000 app
    up_stop ;;
  crowd-clients)  # is part of the app's +230 ms TTFT at 1,000 chats the one load client
                  # process (in crowd-repeat its fastest chat waited 309-442 ms)? 1 x 1,000 chats
                  # against 4 clients x 250, twice each, on one stack
    up_start crowd-clients ERNIE_APP_WORKERS=8 ERNIE_STREAM_INTERVAL=8 || exit 1
    for round in 1 2; do
        (( $(left) > 90 )) || break
        d=/tmp/res/crowd-clients/r$round; mkdir -p "$d"
        cli qa-load --sessions 1000 --timeout-s 240 --json > "$d/one-client.json"
        pids=()  # (a bare `wait` would wait for the stack too)
        for i in 1 2 3 4; do cli qa-load --sessions 250 --timeout-s 240 --json > "$d/client-$i.json" & pids+=($!); done
        wait "${pids[@]}"
        .venv/bin/python - "$d" <<'PY'
import json, statistics, sys
from pathlib import Path
d = Path(sys.argv[1])
for name, files in (("1 client x 1,000", ["one-client.json"]), ("4 clients x 250", [f"client-{i}.json" for i in range(1, 5)])):
    chats = [c for f in files for c in json.loads((d / f).read_text())["sessions"]]
    ttft = sorted(1000 * c["ttft_s"] for c in chats if c.get("ttft_s") is not None)
    print(f"{name}: {len(ttft)} first tokens, TTFT ms p1/p50/p99 {ttft[len(ttft) // 100]:.0f}/"
          f"{statistics.median(ttft):.0f}/{ttft[int(0.99 * len(ttft))]:.0f}")
PY
    done
    up_stop ;;
  clients-both)  # 1,000 chats from 4 load-client processes, through the app and straight to vLLM
                 # (bench, sampled as the chat samples), twice: does either client hold TTFT back?
    up_start clients-both ERNIE_APP_WORKERS=8 ERNIE_STREAM_INTERVAL=8 || exit 1
    for round in 1 2 3; do  # three rounds (two before session-1202g/), each with 64 chats first
        (( $(left) > 60 )) || break
        burst_round "/tmp/res/clients-both/r$round"
    done
    up_stop ;;
  burst-profile)  # where a worker's CPU goes in a 1,000-chat burst on the H200: py-spy on
                  # one of the 8 workers through a whole qa-load run (opening, the burst, the
                  # streams; 8e59b31:benchmarks/app-cost-cpu/profile_split.py split it), then burst_rounds
    up_start burst-profile ERNIE_APP_WORKERS=8 ERNIE_STREAM_INTERVAL=8 || exit 1
    # --nonblocking: the worker is not paused per sample. (So sampled, Python 3.12's coroutine
    # stacks came out cut short, most 1-4 frames, and 106 of 447 samples failed: see
    # burst-profile-paused.)
    profile_worker /tmp/res/burst-profile --nonblocking
    for round in 1 2 3; do
        (( $(left) > 150 )) || break
        burst_round "/tmp/res/burst-profile/r$round"
    done
    up_stop ;;
  burst-profile-paused)  # the same profile with the worker paused per sample (py-spy's default),
                         # for whole stacks: what before the request costs on the H200
    up_start burst-profile-paused ERNIE_APP_WORKERS=8 ERNIE_STREAM_INTERVAL=8 || exit 1
    profile_worker /tmp/res/burst-profile-paused
    up_stop ;;
  clients-ab)  # the chat's client sending through aiohttp (this checkout) against httpx's pool
               # (this checkout's app/engine/engine_client.py with make_client as it was at 5b3b907,
               # carried as .gpu/engine_client_httpx.py; session-1203a/'s first call carried
               # 5b3b907's whole file), in alternating order (A B B A)
    [ -f /tmp/engine_client_aiohttp.py ] || cp app/engine/engine_client.py /tmp/engine_client_aiohttp.py
    ab_rounds clients-ab client_variant aiohttp httpx httpx aiohttp aiohttp httpx; rc=$?
    cp /tmp/engine_client_aiohttp.py app/engine/engine_client.py; exit $rc ;;
  workers-ab)  # 12 app workers against the default 8, alternating (the bursts'
               # timeline put ~85 ms of the app's ~120 before the handler: the queue of 125
               # messages each of 8 workers takes at once)
    ab_rounds workers-ab workers_variant w12 w8 w8 w12 w12 w8; exit $? ;;
  loop-ab)  # the workers without nest_asyncio (app/serve.py: asyncio's C Task and
            # Future; 0.88 of the CPU per message on the 2-core box) against `chainlit run`'s
            # pure-Python loop, alternating
    [ -f /tmp/serve_c_loop.py ] || cp app/serve.py /tmp/serve_c_loop.py
    ab_rounds loop-ab loop_variant c nest nest c c nest; rc=$?
    cp /tmp/serve_c_loop.py app/serve.py; exit $rc ;;
  copies-3)  # the engine tier alone, sustained, with 3 copies on the one GPU, then 1 and 2 (2
             # copies gave 52,488 tok/s from one client process in crowd/copies2/): 1,024 requests in flight per copy, twice that many in all, from 4 client processes
    for copies in 3 1 2; do
        (( $(left) > 150 )) || break
        up_start "copies$copies" ERNIE_ENGINE_COPIES=$copies || exit 1
        cli bench --concurrency $((1024 * copies)) --num-prompts $((2048 * copies)) --input-len 40 \
            --output-len 256 --warmup 0 --processes 4 --no-plots --out "/tmp/res/copies$copies/direct-sustained" \
            > "/tmp/res/copies$copies/direct-sustained.txt" 2>&1
        grep -A3 "^ *conc" "/tmp/res/copies$copies/direct-sustained.txt" | head -n 4
        up_stop
    done ;;
  copies-together)  # 2 copies started together, their KV pools in bytes (copies-3 had
                    # them start one after another): until the chat URL, then a burst
    up_start copies-together ERNIE_ENGINE_COPIES=2 ERNIE_APP_WORKERS=8 || exit 1
    direct_burst copies-together/direct 512
    up_stop ;;
  app-cpu-ab)  # the app's CPU per 1,000 streamed tokens under 1,000 users, this checkout's app/
               # against the app/ of .gpu/app-base.tgz (`git archive BASE app/ | gzip`), in the
               # order base, new, new, base: qa-load's CPU by kind of process on each round
    [ -f .gpu/app-base.tgz ] || { echo "no .gpu/app-base.tgz"; exit 2; }
    [ -f /tmp/app-new.tgz ] || tar -czf /tmp/app-new.tgz app
    round=0
    for variant in base new new base; do
        round=$((round + 1)); d=/tmp/res/app-cpu-ab/$round-$variant
        [ -f "$d/done" ] && continue
        (( $(left) > 150 )) || exit 3
        rm -rf app && if [ "$variant" = base ]; then tar -xzf .gpu/app-base.tgz; else tar -xzf /tmp/app-new.tgz; fi
        up_start "app-cpu-ab/$round-$variant" || exit 1
        cli qa-load --users 1000 --turns 3 --think-s 3 --ramp-s 10 --processes 4 --timeout-s 240 \
            --out "$d/qa" > "$d/qa.txt" 2>&1
        up_stop
        echo "round $round, $variant app/:"; grep -E "TTFT|tokens/s|CPU|PASS|FAIL" "$d/qa.txt" | head -n 12
        touch "$d/done"
    done
    rm -rf app && tar -xzf /tmp/app-new.tgz ;;
  users)  # USERS (3,000) users through the app on each stack of USERS_STACKS (NAME:VAR=V,VAR=V
          # ..., space-separated; default: up's defaults; QA_PROCESSES=N among them: qa-load's
          # client processes, 4 otherwise), qa-load's CPU by kind of process on each;
          # stacks done are skipped, one that would not fit in the call returns 3 (the next call's
          # queue goes on with it)
    for stack in ${USERS_STACKS:-defaults:}; do
        name=${stack%%:*} settings=${stack#*:} d=/tmp/res/users/${stack%%:*}
        [ -f "$d/done" ] && continue
        (( $(left) > 240 )) || exit 3
        processes=4; [[ $settings =~ QA_PROCESSES=([0-9]+) ]] && processes=${BASH_REMATCH[1]}
        up_start "users/$name" ${settings//,/ } || exit 1
        cli qa-load --users "${USERS:-3000}" --turns 3 --think-s 3 --ramp-s 10 --processes "$processes" \
            --timeout-s 240 --out "$d/qa" > "$d/qa.txt" 2>&1
        up_stop
        echo "$name (${settings:-the defaults}):"; grep -E "steady|busy|per 1,000|PASS|FAIL" "$d/qa.txt" | head -n 8
        touch "$d/done"
    done ;;
  models)  # ERNIE_MODELS: two shapes served together, the 0.3B and a 1B-like one (hidden 2048, 28
           # layers, 4 KV heads); `up` prints each KV pool beside the plan's; then each one's tok/s
           # at 256 chats straight to it, alone and with the other loaded at once, and through the app
    mkdir -p /tmp/models /tmp/res/models && rm -rf /tmp/models/*
    cp -r .gpu/model /tmp/models/ernie-0.3b && cp -r .gpu/model /tmp/models/ernie-1b
    python3 - /tmp/models/ernie-1b/config.json <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config.update(hidden_size=2048, num_hidden_layers=28, num_key_value_heads=4, intermediate_size=6144)
json.dump(config, open(sys.argv[1], "w"), indent=2)
PY
    export ERNIE_MODELS=/tmp/models/ernie-0.3b:2048,/tmp/models/ernie-1b:4096
    cli plan --device cuda | tee /tmp/res/models/plan.txt
    start=$SECONDS; up_start models || exit 1; echo "chat URL after $((SECONDS - start)) s"
    grep -E '^\[(models|plan)\]|KV cache:' /tmp/res/models/up.txt
    for m in ernie-0.3b ernie-1b; do
        echo "--- $m alone, 256 at once, 40 in / 256 out"
        direct_burst "models/$m-256" 256 --model "$m" --num-prompts 768
    done
    echo "--- both at once, 256 each"
    pids=()
    for m in ernie-0.3b ernie-1b; do
        cli bench --model "$m" --concurrency 256 --num-prompts 768 --input-len 40 --output-len 256 \
            --warmup 0 --no-plots --out "/tmp/res/models/both-$m" > "/tmp/res/models/both-$m.txt" 2>&1 & pids+=($!)
    done
    wait "${pids[@]}"
    for m in ernie-0.3b ernie-1b; do echo "$m:"; grep -A3 "^ *conc" "/tmp/res/models/both-$m.txt" | head -n 4; done
    for m in ernie-0.3b ernie-1b; do
        echo "--- $m through the app: 256 chats (qa-load --model)"
        cli qa-load --sessions 256 --model "$m" --timeout-s 240 --json > "/tmp/res/models/qa-$m.json"
        .venv/bin/python -c "import json,sys; s=json.load(open(sys.argv[1]))['summary']; print({k: s.get(k) for k in ('sessions','complete','lost','errors')}, 'TTFT ms p50', s['ttft_ms']['median'])" "/tmp/res/models/qa-$m.json"
    done
    cli status 2>&1 | tail -n 20
    up_stop
    echo "--- one model alone at ERNIE_GPU_MEMORY_UTILIZATION=0.9: its pool beside the plan's too"
    unset ERNIE_MODELS
    up_start models/single || exit 1
    grep -E '^\[plan\]|KV cache:' /tmp/res/models/single/up.txt
    up_stop
    .venv/bin/python -c "import pynvml as n; n.nvmlInit(); m = n.nvmlDeviceGetMemoryInfo(n.nvmlDeviceGetHandleByIndex(0), version=n.nvmlMemory_v2); print('NVML total', m.total, 'reserved', m.reserved, 'total - reserved', m.total - m.reserved)"
    .venv-engine/bin/python -c "import torch; print('CUDA total', torch.cuda.mem_get_info()[1])" ;;
  later-source|later-bytecode)  # 3 later starts of the defaults, as the lent machine has
                                # its torch (no byte-code: PYTHONDONTWRITEBYTECODE=1 there, so every
                                # start compiles torch's and sympy's modules again), then with them
                                # byte-compiled as pip would have (benchmarks/gpu/import_cost.sh:
                                # `import torch, torch._dynamo` 6.0-6.4 s -> 3.1-3.7 s)
    if [ "$phase" = later-bytecode ]; then
        site=$(.venv-engine/bin/python -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
        export PYTHONPYCACHEPREFIX=/tmp/pycache-prefix
        start=$SECONDS; .venv-engine/bin/python -m compileall -q -j 0 "$site" /tmp/site >/dev/null 2>&1
        echo "byte-compiled $site and /tmp/site into $PYTHONPYCACHEPREFIX in $((SECONDS - start)) s"
    fi
    each_start "$phase" true "later-1" "later-2" "later-3" || exit 1 ;;
  cap-2copies|cap-2copies-4000|cap-seqs)  # capacity past 1,000 users: 2 engine copies (from 2,000
                                          # to 4,000 once 2,000 passed), or 1 copy taking 2,048 at once
    more=ERNIE_ENGINE_COPIES=2; [ "$phase" = cap-seqs ] && more=ERNIE_MAX_NUM_SEQS=2048
    range=(); [ "$phase" = cap-2copies-4000 ] && range=(2000 4000)
    up_start "$phase" "$more" ERNIE_APP_WORKERS=8 ERNIE_STREAM_INTERVAL=8 || exit 1
    capacity_past_1000 "$phase" 20 "${range[@]}"
    up_stop ;;
  tune-chat|tune-stream|stream-opts|seeds|stats-off|stream-compile|chat-compile)  # start-up and speed:
                                                                # tune unattended, 3 runs a point
    out=/tmp/res/$phase; resume=(); [ -f "$out/tune.json" ] && resume=(--resume)
    if [ "$phase" = tune-chat ]; then  # the chat load: 256 users, 1,024 in / 256 out
        sweep=(--baseline --point "4 API servers: api_servers=4"
               --point "2 copies x 4 API servers: engine_copies=2 api_servers=4"
               --concurrency 256 --num-prompts 768 --input-len 1024 --output-len 256
               --slo-ttft-ms 1000 --slo-tpot-ms 25 --write-env --env-file "$out/tune.env")
    elif [ "$phase" = seeds ]; then  # the seed articles' three memory profiles, the same load
        # With the stack's defaults (4 API servers on the H200); vLLM's own defaults are tune-chat's
        # baseline of 2026-12-02, the same load and runs.
        sweep=(--point "seed 2048 / 0.85: max_model_len=2048 gpu_memory_utilization=0.85"
               --point "seed 4096 / 0.88: max_model_len=4096 gpu_memory_utilization=0.88"
               --point "seed 8192 / 0.82: max_model_len=8192 gpu_memory_utilization=0.82"
               --concurrency 256 --num-prompts 768 --input-len 1024 --output-len 256
               --slo-ttft-ms 1000 --slo-tpot-ms 25)
    elif [ "$phase" = stream-opts ]; then  # one stream: each option alone, then together
        sweep=(--baseline --point "decode graphs: cudagraph_mode=FULL_DECODE_ONLY api_servers=1"
               --point "interval 8: stream_interval=8 api_servers=1" --point "4 API servers: api_servers=4"
               --point "all three: cudagraph_mode=FULL_DECODE_ONLY stream_interval=8 api_servers=4"
               --concurrency 1 --num-prompts 8 --input-len 1024 --output-len 512)
    elif [ "$phase" = stats-off ]; then  # one stream without vLLM's per-step statistics
        sweep=(--baseline --point "stats off: engine_stats=false api_servers=1"
               --point "4 API servers: api_servers=4" --point "4 API servers, stats off: engine_stats=false api_servers=4"
               --concurrency 1 --num-prompts 16 --input-len 1024 --output-len 512)
    elif [ "$phase" = stream-compile ]; then  # one stream without torch.compile, and vLLM's older runner
        sweep=(--point "1 API server: api_servers=1"
               --point "compile off: torch_compile=off api_servers=1"
               --point "compile off, FULL graphs: torch_compile=off cudagraph_mode=FULL api_servers=1"
               --point "v1 runner: model_runner=v1 api_servers=1"
               --point "v1 runner, compile off: model_runner=v1 torch_compile=off api_servers=1"
               --concurrency 1 --num-prompts 16 --input-len 1024 --output-len 512)
    elif [ "$phase" = chat-compile ]; then  # the chat load without torch.compile (does a crowd pay?)
        sweep=(--point "4 API servers: api_servers=4"
               --point "4 API servers, compile off: api_servers=4 torch_compile=off"
               --point "4 API servers, compile off, FULL graphs: api_servers=4 torch_compile=off cudagraph_mode=FULL"
               --concurrency 256 --num-prompts 768 --input-len 1024 --output-len 256
               --slo-ttft-ms 1000 --slo-tpot-ms 25)
    else                               # one stream: vLLM 0.26's options for it
        sweep=(--vary performance_mode=balanced,interactivity --vary api_servers=1 --concurrency 1 --num-prompts 8 --input-len 1024 --output-len 512)
    fi
    mkdir -p "$out"
    cli tune "${sweep[@]}" --repeats 3 --need-max-model-len 2048 --engine-args="--load-format dummy" --out "$out" "${resume[@]}" \
        --total-timeout-s $(( $(left) - 20 )) 2>&1 | grep -v '^\[engine' | tail -n 30
    exit "${PIPESTATUS[0]}" ;;
  *) echo "unknown phase $phase" >&2; exit 2 ;;
esac
