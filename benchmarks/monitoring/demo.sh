#!/usr/bin/env bash
# The dashboard with figures in it, drawn on this machine (docs/monitoring.md): `up` with 2 app
# workers, login, saved chats and a per-user limit; Debian's Prometheus scraping it with the
# config `ernie-chat scrape-config` prints; chat users through qa-load for 4 minutes, two wrong
# passwords and app worker 1 killed half-way; then dashboard_png.py. From the repository's root:
#     bash benchmarks/monitoring/demo.sh [OUT.png]        (about 7 min on 2 CPU cores)
set -euo pipefail
out=$(realpath -m "${1:-dashboard.png}")
work=$(mktemp -d)
export ERNIE_QA_PASSWORD=dashboard-demo-4711
export ERNIE_APP_WORKERS=2 ERNIE_USERS="qa:$ERNIE_QA_PASSWORD" ERNIE_CHAT_DB="$work/chats.db" \
       ERNIE_USER_MESSAGES_PER_MIN=20 ERNIE_MAX_TOKENS=48 ERNIE_LOG_FILE="$work/llm.log" \
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
for _ in 1 2; do curl -s -o /dev/null -H 'Content-Type: application/x-www-form-urlencoded' \
    -d 'username=qa&password=wrong' "$chat/login" || true; done
./scripts/ernie-chat qa-load --url "$chat" --login qa --users 6 --turns 0 --duration-s 240 \
    --think-s 4 --ramp-s 10 --kill worker:1@120 --no-plots --out "$work/qa" | tail -n 6
sleep 10  # the last scrapes
.venv/bin/python benchmarks/monitoring/dashboard_png.py --prometheus http://127.0.0.1:19090 \
    --minutes 5 --out "$out"
