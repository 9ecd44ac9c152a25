"""The open-loop comparison's table: `ernie-chat bench --request-rate` against `vllm bench serve
--request-rate` on the same engine (benchmarks/compare-open-loop.sh, benchmarks/gpu/run.sh
open-loop).

    python benchmarks/open_loop_table.py RATE COUNTERS.jsonl RESULT=RUN ...

RESULT: our bench.json or vLLM's --save-detailed JSON (told apart by their keys); RUN: its name in
COUNTERS.jsonl (`python -m server.metrics URL RUN-before`, then `RUN-after`), for vLLM's own mean
TTFT over the run. One row per result, in the order given, then each tool's TTFT p50 over its
runs (mean, range) and ours against vLLM's. vLLM's arrivals are its detailed start times, less its
queue times where it writes them (later versions; without --max-concurrency they are 0).
Run it from the repo root, with the app's environment (server.metrics).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from server.metrics import read_counters, run_means_ms  # noqa: E402

OURS, VLLM = "ernie-chat bench", "vllm bench serve"


def mean_gap_ms(times: list[float]) -> float:
    return (max(times) - min(times)) / (len(times) - 1) * 1000 if len(times) > 1 else float("nan")


def row(path: Path, run: str, counters: dict) -> dict:
    data = json.loads(path.read_text())
    own = (run_means_ms(counters, run) or {}).get("ttft")
    if "levels" in data:  # ours
        s = data["levels"][0]["summary"]
        return dict(run=run, tool=OURS, completed=s["completed"], p50=s["ttft_ms"]["median"],
                    mean=s["ttft_ms"]["mean"], own=own, gap=s["mean_interarrival_ms"],
                    rps=s["request_throughput"])
    ttfts = [t * 1000 for t, e in zip(data["ttfts"], data["errors"]) if not e]
    queued = data.get("queue_times") or [0.0] * len(data["start_times"])
    arrivals = [start - q for start, q in zip(data["start_times"], queued)]
    return dict(run=run, tool=VLLM, completed=data["completed"],
                p50=statistics.median(ttfts) if ttfts else float("nan"),
                mean=statistics.mean(ttfts) if ttfts else float("nan"), own=own,
                gap=mean_gap_ms(arrivals), rps=data["request_throughput"])


def main(argv: list[str]) -> None:
    rate, counters = float(argv[0]), read_counters(Path(argv[1]))
    rows = [row(Path(result), run, counters) for result, _, run in (a.rpartition("=") for a in argv[2:])]
    show = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    print(f"request rate asked {rate:g}/s: the mean gap between arrivals should be {1000 / rate:.1f} ms")
    print(f"{'run':<16}{'tool':<18}{'completed':>10}{'TTFT p50 ms':>13}{'TTFT mean ms':>14}"
          f"{'engine mean ms':>16}{'mean inter-arrival ms':>23}{'req/s':>8}")
    for r in rows:
        print(f"{r['run']:<16}{r['tool']:<18}{r['completed']:>10}{r['p50']:>13.2f}{r['mean']:>14.2f}"
              f"{show(r['own']):>16}{r['gap']:>23.1f}{r['rps']:>8.2f}")
    p50s = {tool: [r["p50"] for r in rows if r["tool"] == tool] for tool in (OURS, VLLM)}
    for tool, values in p50s.items():
        if values:
            print(f"{tool}: TTFT p50 over {len(values)} run(s): mean {statistics.mean(values):.2f} ms, "
                  f"range {min(values):.2f}-{max(values):.2f}")
    if p50s[OURS] and p50s[VLLM]:
        ours, theirs = statistics.mean(p50s[OURS]), statistics.mean(p50s[VLLM])
        apart = min(p50s[VLLM]) > max(p50s[OURS]) or min(p50s[OURS]) > max(p50s[VLLM])
        print(f"ours against vLLM's, TTFT p50 means: {100 * (ours / theirs - 1):+.1f} % "
              f"({'within' if abs(ours / theirs - 1) <= 0.05 else 'not within'} 5 %); the ranges "
              f"{'do not overlap' if apart else 'overlap'}")


if __name__ == "__main__":
    main(sys.argv[1:])
