#!/usr/bin/env bash
# The H200 engine measurements of docs/performance.md, through the project's own `plan`, `tune`
# and `bench`. Runs on the lent GPU machine after the vLLM bundle is installed
# (the README of the bundle's tools, GPU_KIT: benchmarks/gpu/kit.sh), from the repo root:  bash benchmarks/gpu/run.sh PHASE
# The model is ERNIE-4.5-0.3B-PT's exact shape with random weights (.gpu/model,
# --load-format dummy): speed and memory are the real model's; the text is not.
#
# Getting there, as on 2026-12-01 (device calls back to back: the machine keeps /tmp only
# while it is warm). A call carries 64 MiB and the tracked tree is ~20 MiB, so the bundle
# goes in three chunks of ~30 MiB (split -n 3 of build_bundle.sh's vllm_site.tar.xz into
# .gpu/c1..c3, same SHA256SUMS), and pydantic-settings, which our settings need and the
# machine lacks, as a wheel in .whl (pip download --no-deps --only-binary=:all:
# --python-version 3.12 --platform manylinux_2_17_x86_64 -d .whl pydantic-settings==2.16.3):
#   1, 2. carry .gpu/c1 (then .gpu/c2), .gpu/install.sh, .gpu/SHA256SUMS: bash .gpu/install.sh stash
#   3. carry .gpu/c3, .gpu/install.sh, .gpu/SHA256SUMS, .gpu/model, .whl:
#      bash .gpu/install.sh && python3 -m pip install -q --no-index --no-deps --target /tmp/site \
#          .whl/*.whl && bash benchmarks/gpu/run.sh queue PHASE...
#   4... carry .gpu/model, .whl: bash benchmarks/gpu/run.sh queue PHASE...  (the same list)
#
# With prepare.sh's pieces (vLLM in .gpu/c1..c7, the app's wheels in .gpu/a1..a7, 14 MiB each),
# four set-up calls as in $GPU_KIT/README.md, four pieces a call beside the ~5 MiB tree:
#   1. carry .gpu/c1..c4, .gpu/install.sh, .gpu/SHA256SUMS: bash .gpu/install.sh stash
#   2. carry .gpu/c5..c7, .gpu/a1, the same two, .gpu/stack_env.sh, .gpu/APP_SHA256:
#      bash .gpu/install.sh && bash .gpu/stack_env.sh stash
#   3. carry .gpu/a2..a5, .gpu/stack_env.sh, .gpu/APP_SHA256: bash .gpu/stack_env.sh stash
#   4. carry .gpu/a6, .gpu/a7, .gpu/model, .gpu/stack_env.sh, .gpu/APP_SHA256:
#      bash .gpu/stack_env.sh setup && bash benchmarks/gpu/run.sh queue PHASE...
# Our CLI then runs in the app's .venv (app() below). `queue open-loop` needs a second call,
# back to back, with .gpu/model alone and the same command (see open-loop below).
# Three calls instead, without the app's wheels (as on 2026-12-07, H100): our CLI then runs on
# the machine's Python with the bundle and the few packages both lack, as wheels in .whl (here:
# pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_34_x86_64
# --platform manylinux_2_17_x86_64 --platform any -d .whl, with requirements/app.txt's pins of
# pydantic-settings python-dotenv bcrypt cryptography cffi pycparser rich pygments markdown-it-py
# mdurl click prometheus-client typing-inspection annotated-types): (1) c1..c4 as above;
# (2) c5..c7, install.sh, SHA256SUMS, .gpu/model, .whl: bash .gpu/install.sh && python3 -m pip
# install -q --no-index --no-deps --target /tmp/site .whl/*.whl && bash benchmarks/gpu/run.sh
# queue open-loop; (3) .gpu/model: the same queue command, for the second round.
#
# One fast stream and the chat load, with findings that survive a second run: after the
# install calls, the same command in each call,
#   bash benchmarks/gpu/run.sh queue single chat-crowd
# runs both sweeps: `single` 7 points of ~100 s (one start, one settling request, 3 runs of
# 8 replies), `chat-crowd` 6 of ~130 s (one start, one settling round of 256, 3 runs of 768):
# about 25 minutes in all, three calls. A sweep the call's 10 minutes cut short exits 3, and
# `queue` leaves it undone, so the next call resumes it (tune --resume) where it stopped.
# `chat-crowd` needs ERNIE_API_SERVERS (the stack's setting). Less time: REPEATS=2 (no
# findings then, only means), ONE_PROMPTS, LOAD_PROMPTS; or drop points from the phases.
set -uo pipefail
phase=$1
out=${OUT:-/tmp/out}; mkdir -p "$out" /tmp/res
export PYTHONPATH=$PWD:/tmp/site VLLM_USE_FLASHINFER_SAMPLER=0 ERNIE_SERVED_MODEL_NAME=ernie
# One chat workload for every point: 1,024-token prompts, 256-token replies, 256 users.
# 768 requests are 3 rounds of the 256 users, 11-16 s: too short for goodput to settle
# (docs/performance.md, "Memory settings"); LOAD_PROMPTS=2560 gives 10.
load=(--concurrency 256 --num-prompts "${LOAD_PROMPTS:-768}" --input-len 1024 --output-len 256
      --slo-ttft-ms 1000 --slo-tpot-ms 25)
# One stream, as one chat user sees it: 1,024-token prompt, 512-token reply, 8 requests a run.
one_stream=(--concurrency 1 --num-prompts "${ONE_PROMPTS:-8}" --input-len 1024 --output-len 512
            --slo-ttft-ms 1000 --slo-tpot-ms 25 --repeats "${REPEATS:-3}" --settle-requests 1)
# A device call may run 600 s: every phase stops in time for the results to come back.
call_s=${CALL_DEADLINE_S:-570}
left() { echo $((call_s - SECONDS)); }
tune() {  # tune NAME FLAGS...: one sweep, engine stopped after each point. A sweep the call's
          # time cut short exits 3 and goes on (--resume) when the same phase runs again.
    local name=$1; shift
    local resume=(); [ -e "/tmp/res/$name/tune.json" ] && resume=(--resume)
    # One run without settling, as the phases of 2026-11/12 ran; `single` and `chat-crowd` say otherwise.
    python3 -m server.cli tune --model .gpu/model --engine-python python3 --device cuda \
        --engine-args "--load-format dummy" --need-max-model-len 2048 "${resume[@]}" \
        --repeats 1 --settle-requests 0 \
        --point-timeout-s 300 --total-timeout-s "$(( $(left) - 15 ))" --out "/tmp/res/$name" "$@" 2>&1 | tail -n 60
}
in_len=512; out_len=128  # the comparison's load, for both tools
res=/tmp/res/compare      # the comparison's folder: each run's results, counters.jsonl, runs.txt
rate=""                   # open-loop: requests a second; empty: a closed loop of IN_FLIGHT
# Our CLI and the counters: in the app's own environment where `.gpu/stack_env.sh setup` made
# one (as ./scripts/ernie-chat runs; its settings need pydantic-settings, which the bundle
# lacks), else the machine's Python with the bundle and .whl, as on 2026-12-01.
app() { if [ -x .venv/bin/python ]; then env -u PYTHONPATH .venv/bin/python "$@"; else python3 "$@"; fi; }
engine_up() { python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/v1/models')" 2>/dev/null; }
compare_engine() {  # one engine for both tools, and a warm-up run that is not counted. With
    # KEEP_ENGINE set it runs in a session of its own, so that it outlives the device call, and
    # the same phase in the next call (back to back) goes on with it, without a new start.
    mkdir -p "$res"
    if engine_up; then echo "engine: the one started earlier, pid $(cat /tmp/res/engine.pid)"; else
        rm -f /tmp/res/engine.pid  # the API server writes its own pid (setsid may fork)
        ${KEEP_ENGINE:+setsid} bash -c 'echo $$ > /tmp/res/engine.pid; exec "$@"' engine \
            python3 -m vllm.entrypoints.openai.api_server --model .gpu/model \
            --load-format dummy --served-model-name ernie --generation-config vllm --port 8000 \
            --max-model-len 2048 --gpu-memory-utilization 0.5 --no-enable-prefix-caching \
            > /tmp/res/compare-engine.log 2>&1 &
        for _ in $(seq 100); do engine_up && break; sleep 2; done
        echo "engine up after ${SECONDS} s; warm-up (not counted)"
        app -m server.cli bench --url http://127.0.0.1:8000 --concurrency 64 --input-len $in_len \
            --output-len $out_len --num-prompts 512 --seed 99 --no-plots --save-prompts \
            --out /tmp/res/warm | tail -n 3
    fi
    local api; api=$(cat /tmp/res/engine.pid)
    # The API server's and the engine core's CPU, twice a second, for the whole phase: which
    # process a tool's load keeps busy (runs.txt holds each run's start and end).
    cpu_trace "$api" "$res/api-server.cpu" &
    cpu_trace "$(pgrep -P "$api" -f EngineCore | head -n 1)" "$res/engine-core.cpu" &
    # vLLM's tool replays the prompts of our last run (the warm-up's before the first)
    last_prompts=$(ls -t "$res"/ours-*/prompts.json /tmp/res/warm/prompts.json 2>/dev/null | head -n 1)
}
stop_engine() {  # the engine and the traces: the next phase needs the GPU
    kill $(jobs -p) "$(cat /tmp/res/engine.pid 2>/dev/null)" 2>/dev/null; rm -f /tmp/res/engine.pid; sleep 5
}
cpu_trace() {  # cpu_trace PID FILE: the process's CPU ticks (user, system) twice a second
    [ -n "$1" ] || return 0
    while [ -e "/proc/$1/stat" ]; do
        echo "$(date +%s.%N) $(awk '{print $14, $15}' "/proc/$1/stat" 2>/dev/null)" >> "$2"; sleep 0.5
    done
}
pace() {  # pace FLAG IN_FLIGHT: FLAG IN_FLIGHT in a closed loop; with `rate` set, an open loop of
          # Poisson arrivals at that rate with no cap on the requests in flight, for either tool
    if [ -n "$rate" ]; then echo "--request-rate $rate --burstiness 1"; else echo "$1 $2"; fi
}
# Both tools send the same load (in_len, out_len, ignore_eos, pace). vLLM's tool sends the
# prompts our last run sent (`--save-prompts`, in ShareGPT form; more are repeated in its
# own order; in the open loop none: it sends them in ours), so both send the same kind of text;
# with prefix caching off a repeat costs the same as a new prompt.
vllm_tool() {  # vllm_tool IN_FLIGHT PROMPTS SEED: one run of `vllm bench serve`
    python3 -m vllm.entrypoints.cli.main bench serve --backend vllm --model ernie \
        --tokenizer .gpu/model --port 8000 --dataset-name sharegpt --dataset-path "$last_prompts" \
        --sharegpt-output-len $out_len --num-prompts "$2" $(pace --max-concurrency "$1") \
        ${rate:+--disable-shuffle} --ignore-eos --percentile-metrics ttft,tpot,itl,e2el --save-result \
        --save-detailed --result-dir "$res" --result-filename "vllm-$3.json" --seed "$3" > "$res/vllm-$3.txt" 2>&1 &
    local pid=$! rc; cpu_trace $pid "$res/vllm-$3.cpu"; wait $pid; rc=$?
    grep -E "Request throughput|Mean TTFT|Median TTFT" "$res/vllm-$3.txt" | tr -s ' ' | paste -sd' '
    return $rc
}
ours() {  # ours IN_FLIGHT PROMPTS SEED: one run of our bench; compare afterwards with
          # `ernie-chat bench --plot-only ours-SEED/bench.json --compare-vllm vllm-N.json`
    app -m server.cli bench --url http://127.0.0.1:8000 $(pace --concurrency "$1") --input-len $in_len \
        --output-len $out_len --num-prompts "$2" --seed "$3" --no-plots --save-prompts \
        --out "$res/ours-$3" > "$res/ours-$3.txt" 2>&1 || return
    last_prompts=$res/ours-$3/prompts.json
    grep -A2 -E "^ conc" "$res/ours-$3.txt" | tail -n 1
}
pack() { tar -czf "$out/${res##*/}.tgz" --exclude=prompts.json -C /tmp/res "${res##*/}" compare-engine.log; }
counters() {  # counters NAME: vLLM's /metrics counters now, one JSON line in counters.jsonl
    app -m server.metrics http://127.0.0.1:8000 "$1" >> "$res/counters.jsonl"
}
timed() {  # timed TOOL IN_FLIGHT PROMPTS SEED: one run, with its times and the counters around it;
           # a failed run gets no "end" (the tables leave it out) and fails
    counters "$1-$4-before"; echo "$1-$4 start $(date +%s.%N)" >> "$res/runs.txt"
    "$@" || { echo "$1 run $4 failed: see $res/${1%_tool}-$4.txt"; return 1; }
    echo "$1-$4 end $(date +%s.%N)" >> "$res/runs.txt"; counters "$1-$4-after"
}
alternate() {  # alternate ROUNDS IN_FLIGHT PROMPTS SEED [FIRST]: rounds FIRST (1) to ROUNDS of
               # both tools, vLLM's first in odd ones; its runs get seeds SEED+n, ours SEED+100+n
    for n in $(seq "${5:-1}" "$1"); do
        (( SECONDS > deadline )) && { echo "stopping before round $n: ${SECONDS}s used"; break; }
        echo "== $(pace in-flight "$2"), round $n (${SECONDS}s)"
        if (( n % 2 )); then timed vllm_tool "$2" "$3" $(($4 + n)) && timed ours "$2" "$3" $(($4 + 100 + n))
        else timed ours "$2" "$3" $(($4 + 100 + n)) && timed vllm_tool "$2" "$3" $(($4 + n)); fi
        local ok=$?; pack
        (( ok == 0 )) || { echo "round $n not done: a run failed"; return 1; }  # the next call repeats it
        touch "$res/round-$n"
    done
}
open_loop() {  # the open-loop phase (below); exits 3 while rounds remain, the engine kept for them
    rate=${RATE:-4} in_len=${IN_LEN:-128} out_len=${OUT_LEN:-64} res=/tmp/res/open-loop
    local prompts=${OPEN_PROMPTS:-400} rounds=${OPEN_ROUNDS:-2} done_rounds runs=() label
    # a round: two runs of PROMPTS / RATE seconds of arrivals, and each tool's start (vLLM's ~15 s)
    deadline=$(( call_s - $(python3 -c "print(int(2 * $prompts / $rate + 45))") ))
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.csv"
    KEEP_ENGINE=1 compare_engine
    done_rounds=$(ls "$res"/round-* 2>/dev/null | wc -l)
    alternate "$rounds" open "$prompts" 800 $((done_rounds + 1))
    done_rounds=$(ls "$res"/round-* 2>/dev/null | wc -l)
    for label in $(awk '$2 == "end" {print $1}' "$res/runs.txt" 2>/dev/null); do
        case $label in ours-*) runs+=("$res/$label/bench.json=$label") ;;
                       *) runs+=("$res/vllm-${label##*-}.json=$label") ;; esac
    done
    (( ${#runs[@]} )) && app benchmarks/open_loop_table.py "$rate" "$res/counters.jsonl" "${runs[@]}" \
        | tee "$out/open-loop-table.txt"
    if (( done_rounds < rounds )); then echo "open-loop: $done_rounds of $rounds rounds done"; return 3; fi
    stop_engine
}
deadline=${COMPARE_DEADLINE_S:-$((call_s - 100))}  # no compare round starts after it
# Seconds a phase needs (engine starts of 50-110 s, a chat-load bench of ~30 s each).
declare -A need=([fresh-batch]=400 [fresh-seed-8192]=140 [fresh-defaults]=150
                 [fresh-seed-2048]=140 [fresh-seed-4096]=140 [compare]=300
                 [single]=150 [chat-crowd]=200 [open-loop]=280)
if [ "$phase" = queue ]; then
    # queue PHASE...: the phases not yet done on this machine (/tmp/res/done-*), in order,
    # each only if the call has the time it needs; the same command in the next call goes on.
    shift
    for p in "$@"; do
        [ -e "/tmp/res/done-$p" ] && continue
        if (( $(left) < ${need[$p]:-300} )); then echo "queue: $p waits for the next call ($(left) s left)"; continue; fi
        echo "=== $p (${SECONDS} s into the call)"
        CALL_DEADLINE_S=$(left) QUEUED=1 bash "$0" "$p"; rc=$?
        # 3: a tune sweep the call's time cut short; the same queue in the next call resumes it.
        if (( rc == 3 )); then echo "queue: $p goes on in the next call"; else echo "exit $rc" > "/tmp/res/done-$p"; fi
        # All so far, in case the next phase is cut off; in pieces, since no file over 16 MiB
        # comes back from the machine. Here: cat results.tgz.part-* | tar -xzf -
        rm -f "$out"/results.tgz.part-*
        tar -czf - --exclude=prompts.json -C /tmp/res . | split -b 15M - "$out/results.tgz.part-"
    done
    echo "queue: done: $(cd /tmp/res && ls done-* 2>/dev/null | sed 's/done-//' | paste -sd' ')"
    exit 0
fi
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
  # The goodput table again with prompts that differ (the runs above shared one prompt:
  # the stand-in tokenizer read the corpus as <unk> and the prefix cache served it).
  # One sweep each, so that `queue` can spread them over device calls.
  fresh-batch)     tune fresh-batch --utilization 0.9 --max-model-len 8192 \
                       --max-num-seqs default,128,256 "${load[@]}" ;;
  fresh-seed-8192) tune fresh-seed-8192 --utilization 0.82 --max-model-len 8192 "${load[@]}" ;;
  fresh-defaults)  tune fresh-defaults --utilization 0.9 --max-model-len 131072 "${load[@]}" ;;
  fresh-seed-2048) tune fresh-seed-2048 --utilization 0.85 --max-model-len 2048 "${load[@]}" ;;
  fresh-seed-4096) tune fresh-seed-4096 --utilization 0.88 --max-model-len 4096 "${load[@]}" ;;
  compare) # ours against `vllm bench serve` on one engine: a warm-up, then rounds of ~30 s
            # in alternating order; ours sends new prompts every run, vLLM's its last ones
    compare_engine
    alternate "${COMPARE_ROUNDS:-4}" 64 "${COMPARE_PROMPTS:-2880}" 100
    stop_engine ;;
  # The open-loop check: `bench --request-rate 4 --num-prompts 400`'s TTFT p50 within 5 % of
  # `vllm bench serve --request-rate 4`'s on the same prompts and engine
  # (benchmarks/compare-open-loop.sh, which the 2-core CPU could not settle). Rounds of both tools as in `compare`, each an open loop of
  # OPEN_PROMPTS (400) Poisson arrivals at RATE (4)/s, no cap in flight; vLLM's tool replays
  # our last run's prompts (--dataset-name sharegpt --disable-shuffle), IN_LEN (128) prompt and
  # OUT_LEN (64) reply tokens (ignore_eos), prefix caching off. OPEN_ROUNDS (2) rounds of ~220 s
  # after a start of 60-110 s do not fit one call: the phase stops where the call's time ends
  # (exit 3, its engine left running) and `queue open-loop` in the next call, back to back, goes on
  # with that engine. Each call prints the table of the runs so far (open_loop_table.py).
  open-loop) open_loop ;;
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
  # With repeats: each point settles (one unmeasured round), then REPEATS runs of
  # prompts of their own; tune's table gives mean ±sd [min-max] and calls a difference a
  # finding only when the ranges of runs do not overlap. A sweep resumes itself in the
  # next call when this one's time runs out (see the header).
  single)  # one stream, 1,024 in / 512 out: TPOT per option of ERNIE_* "one fast stream"
    tune single "${one_stream[@]}" \
        --point "defaults: performance_mode=balanced" \
        --point "interactivity: performance_mode=interactivity" \
        --point "decode graphs: cudagraph_mode=FULL_DECODE_ONLY" \
        --point "interval 4: stream_interval=4" \
        --point "interval 16: stream_interval=16" \
        --point "no async: async_scheduling=off" \
        --point "all three: performance_mode=interactivity cudagraph_mode=FULL_DECODE_ONLY stream_interval=4" ;;
  chat-crowd) # the chat load (256 users) over API server processes and async scheduling
    tune chat-crowd --vary api_servers=1,2,4 --vary async_scheduling=default,off \
        --repeats "${REPEATS:-3}" --settle-requests 256 "${load[@]}" ;;
  eager)   # single-stream decode: CUDA graphs against --enforce-eager
    one=(--concurrency 1 --num-prompts 6 --input-len 128 --output-len 512)
    tune graphs --utilization 0.5 --max-model-len 8192 "${one[@]}"
    ERNIE_ENFORCE_EAGER=true tune eager --utilization 0.5 --max-model-len 8192 "${one[@]}" ;;
esac
rc=$?
[ -n "${QUEUED:-}" ] || tar -czf "$out/$phase.tgz" --exclude=prompts.json -C /tmp/res .
exit $rc
