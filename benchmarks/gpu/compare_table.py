"""One line per run of `run.sh compare`: both tools' figures, the engine's own, and its CPU.

    python3 benchmarks/gpu/compare_table.py DIR

DIR: e.g. compare-same-prompts/session-a of 8e59b31:benchmarks/gpu/h200/, extracted with
`git archive` (docs/performance-data.md).

Reads what run.sh writes in a compare folder: each run's result (ours-N.json or
ours-N/bench.json; vllm-N.json), runs.txt (when each run started and ended),
counters.jsonl (vLLM's /metrics counters before and after each run) and the CPU
traces of the API server and the engine core (ticks of 10 ms, twice a second).
The engine's TTFT and E2E are timed from the tokenized request on; the client's
minus the engine's is what the HTTP front end and the network add.  Runs where the
machine has vLLM (and so prometheus_client, for server.metrics) or our app environment.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from server.metrics import read_counters, run_means_ms  # noqa: E402

TICKS_PER_S = 100


def client_figures(folder: Path, tool: str, seed: str) -> dict:
    if tool == "ours":
        path = folder / f"ours-{seed}.json"
        path = path if path.exists() else folder / f"ours-{seed}" / "bench.json"
        s = json.loads(path.read_text())["levels"][0]["summary"]
        return {"req_s": s["request_throughput"], "tok_s": s["output_throughput"],
                "ttft": s["ttft_ms"]["mean"], "tpot": s["tpot_ms"]["mean"],
                "itl": s["itl_ms"]["mean"], "e2e": s["e2e_ms"]["mean"], "duration": s["duration_s"]}
    r = json.loads((folder / f"vllm-{seed}.json").read_text())
    return {"req_s": r["request_throughput"], "tok_s": r["output_throughput"],
            "ttft": r["mean_ttft_ms"], "tpot": r["mean_tpot_ms"], "itl": r["mean_itl_ms"],
            "e2e": r["mean_e2el_ms"], "duration": r["duration"]}


def cpu_trace(path: Path) -> list[tuple[float, int]]:
    points = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:
            points.append((float(parts[0]), int(parts[1]) + int(parts[2])))
    return points


def cores_used(trace: list[tuple[float, int]], start: float, end: float) -> float:
    """CPU cores a process used between two times (its trace's samples inside them)."""
    inside = [p for p in trace if start <= p[0] <= end]
    if len(inside) < 2:
        return float("nan")
    return (inside[-1][1] - inside[0][1]) / TICKS_PER_S / (inside[-1][0] - inside[0][0])


def rows(folder: Path) -> list[str]:
    times: dict[str, dict[str, float]] = {}
    for line in (folder / "runs.txt").read_text().splitlines():
        name, what, at = line.split()
        times.setdefault(name, {})[what] = float(at)
    counters = read_counters(folder / "counters.jsonl")
    api, core = cpu_trace(folder / "api-server.cpu"), cpu_trace(folder / "engine-core.cpu")
    out = [f"{'run':<16}{'req/s':>8}{'out tok/s':>10}{'TTFT ms':>9}{'engine':>8}{'TPOT ms':>9}"
           f"{'E2E ms':>8}{'engine':>8}{'pieces':>7}{'API cores':>10}{'core cores':>11}"]
    for name, at in times.items():
        tool, seed = name.removesuffix("_tool").split("-")
        c = client_figures(folder, tool, seed)
        e = run_means_ms(counters, name)
        # The load is the last `duration` seconds of the run (before it: prompts, tokenizer).
        start, end = at["end"] - c["duration"] + 2, at["end"] - 2
        pieces = (c["e2e"] - c["ttft"]) / c["itl"] + 1  # streamed chunks per reply
        out.append(f"{name:<16}{c['req_s']:>8.2f}{c['tok_s']:>10.0f}{c['ttft']:>9.1f}{e['ttft']:>8.1f}"
                   f"{c['tpot']:>9.2f}{c['e2e']:>8.1f}{e['e2e']:>8.1f}{pieces:>7.0f}"
                   f"{cores_used(api, start, end):>10.2f}{cores_used(core, start, end):>11.2f}")
    return out


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(f"== {arg}")
        print("\n".join(rows(Path(arg))))
