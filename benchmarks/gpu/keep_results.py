"""Keep what a crowd.sh call brought back, small enough for git.

    python3 benchmarks/gpu/keep_results.py RESULTS_DIR benchmarks/gpu/h200/FOLDER

RESULTS_DIR is the unpacked results.tgz (/tmp/res there). Kept: the text files (up.txt,
caches.txt, bench's tables), vLLM's log gzipped, each qa-load JSON as its summary plus one CSV
row per chat (open, first token, end: the streamed text is the random model's), each bench
folder's bench.json and requests.csv gzipped (as is any other file over 64 KiB). Left out: the app workers' and HAProxy's logs,
engine-state.json, the queue's done-* markers, and a bench.json over BIG_BENCH bytes when its
requests.csv is beside it (a sustained run's per-token gaps: 4-13 MiB gzipped for 2,048-6,144
requests, which would crowd the device's 64-MiB carry; requests.csv has each request's figures).
"""

from __future__ import annotations

import csv
import gzip
import json
import shutil
import sys
from pathlib import Path

LEFT_OUT = ("app.log", "balancer.log", "engine-state.json")
BIG_BENCH = 4 * 2**20
CHAT_COLUMNS = ("index", "welcomed", "moved", "resumed", "open_s", "ttft_s", "total_s", "replied",
                "complete", "reply_tokens", "error", "sent_at")


def keep_qa(source: Path, target: Path) -> None:
    run = json.loads(source.read_text())
    (target.parent / f"{source.stem}-summary.json").write_text(
        json.dumps({k: v for k, v in run.items() if k != "sessions"}, indent=1))
    with gzip.open(target.parent / f"{source.stem}-chats.csv.gz", "wt", newline="") as f:
        rows = csv.writer(f)
        rows.writerow(CHAT_COLUMNS)
        rows.writerows([chat.get(c, "") for c in CHAT_COLUMNS] for chat in run["sessions"])


def keep(source: Path, target: Path) -> None:
    for path in sorted(source.rglob("*")):
        if not path.is_file() or path.name.startswith("done-"):
            continue
        name = path.name
        if name in LEFT_OUT or name.startswith("app-worker"):
            continue
        if name == "bench.json" and path.stat().st_size > BIG_BENCH and path.with_name("requests.csv").exists():
            continue
        out = target / path.relative_to(source)
        out.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(".json") and "sessions" in json.loads(path.read_text() or "{}"):
            keep_qa(path, out)
        elif name.endswith((".log", ".csv")) or path.stat().st_size > 64 * 1024:
            with path.open("rb") as f, gzip.open(f"{out}.gz", "wb") as g:
                shutil.copyfileobj(f, g)
        else:
            shutil.copy2(path, out)


if __name__ == "__main__":
    keep(Path(sys.argv[1]), Path(sys.argv[2]))
