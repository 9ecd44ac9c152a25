#!/usr/bin/env bash
# The dashboard with figures in it, drawn on this machine (docs/monitoring.md): `up` with 2 app
# workers, login, saved chats and a per-user limit; Debian's Prometheus scraping it with the
# config `ernie-chat scrape-config` prints; six chat users of one login through qa-load for 4
# minutes, two wrong passwords, a second login sending far more than its limit for a minute, and
# app worker 1 killed half-way; then dashboard_png.py. From the repository's root:
#     bash benchmarks/monitoring/demo.sh [OUT.png]        (about 7 min on 2 CPU cores)
set -euo pipefail
out=$(realpath -m "${1:-dashboard.png}")
work=$(mktemp -d)
export ERNIE_QA_PASSWORD=dashboard-demo-4711
export ERNIE_APP_WORKERS=2 ERNIE_USERS="qa:$ERNIE_QA_PASSWORD,heavy:$ERNIE_QA_PASSWORD" ERNIE_CHAT_DB="$work/chats.db" \
       ERNIE_USER_MESSAGES_PER_MIN=100 ERNIE_MAX_TOKENS=48 ERNIE_LOG_FILE="$work/llm.log" \
       ERNIE_USAGE_LOG="$work/usage.jsonl"
command -v prometheus >/dev/null || { echo "needs Debian's prometheus: apt-get install prometheus" >&2; exit 1; }
./scripts/up > "$work/up.txt" 2>&1 &
up_pid=$!
prom_pid=
trap 'kill $prom_pid 2>/dev/null; kill -TERM $up_pid 2>/dev/null; wait $up_pid 2>/dev/null; rm -rf "$work"' EXIT
echo "[demo] starting the stack (log: $work/up.txt)"
until grep -q '^Chat: ' "$work/up.txt"; do
    kill -0 $up_pid 2>/dev/null || { tail -n 30 "$work/up.txt"; exit 1; }
    sleep 1
done
chat=$(sed -n 's/^Chat: *//p' "$work/up.txt")
./scripts/ernie-chat scrape-config 2>/dev/null | sed 's/scrape_interval: .*/scrape_interval: 2s/' > "$work/prometheus.yml"
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
    --web.listen-address=127.0.0.1:19090 > "$work/prometheus.log" 2>&1 &
prom_pid=$!
echo "[demo] $chat; Prometheus on 127.0.0.1:19090; 4 minutes of chat users"
# The failed logins below count from Prometheus's first sample of the app's 0.
until curl -s "http://127.0.0.1:19090/api/v1/query?query=ernie_chat_logins_failed_total" | grep -q '"value"'; do
    sleep 1
done
for _ in 1 2; do curl -s -o /dev/null -H 'Content-Type: application/x-www-form-urlencoded' \
    -d 'username=qa&password=wrong' "$chat/login" || true; done
# The limit is per login: six users thinking 4 s stay under it, eight thinking 1 s do not.
(sleep 60 && ./scripts/ernie-chat qa-load --url "$chat" --login heavy --users 8 --turns 0 \
    --duration-s 60 --think-s 1 --ramp-s 2 --no-plots --out "$work/heavy" > "$work/heavy.txt" 2>&1) &
heavy_pid=$!
./scripts/ernie-chat qa-load --url "$chat" --login qa --users 6 --turns 0 --duration-s 240 \
    --think-s 4 --ramp-s 10 --kill worker:1@120 --no-plots --out "$work/qa" | tail -n 6 || echo "[demo] qa-load counted failures (above)"
wait $heavy_pid || true  # its limited messages make it report FAIL
tail -n 4 "$work/heavy.txt"
sleep 10  # the last scrapes
.venv/bin/python benchmarks/monitoring/dashboard_png.py --prometheus http://127.0.0.1:19090 \
    --minutes 5 --out "$out"
