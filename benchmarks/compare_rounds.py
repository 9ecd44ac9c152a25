"""The rounds of benchmarks/compare-cpu.sh side by side: ours against `vllm bench serve`.

    .venv/bin/python benchmarks/compare_rounds.py RESULTS_DIR

One line per round (ours-N/bench.json against vllm-N.json, the same prompts), then the
median difference over all rounds and over the clean ones.  Where vLLM's counters were
read around its runs (counters.jsonl), the engine's own mean TTFT for both tools ends
each line: the part of the TTFT that passed inside the engine.  A round is clean when
neither tool got a bunched reply: one whose tokens reached the client all at once at
the end (its first token after half of its time, while the reply has more tokens than
one), which the 2-core CPU engine does now and then (benchmarks/cpu-vs-vllm-bench.md);
such a run measures that stall, not the tool.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from server.loadtest.bench.report import vllm_comparison  # noqa: E402
from server.loadtest.bench.run import BenchResult  # noqa: E402
from server.metrics import read_counters, run_means_ms  # noqa: E402

FIGURES = ("request throughput (req/s)", "output throughput (tok/s)", "mean TTFT (ms)",
           "median TTFT (ms)", "mean TPOT (ms)")


def bunched(ttft_and_rest: list[tuple[float, float]]) -> int:
    """Replies whose first token came after half their time: streamed in one burst."""
    return sum(1 for ttft, rest in ttft_and_rest if rest > 0 and ttft > rest)


def ours_bunched(result: dict) -> tuple[int, int]:
    records = [r for r in result["levels"][0]["records"] if r["success"]]
    return bunched([(r["ttft_s"], r["e2e_s"] - r["ttft_s"]) for r in records]), len(records)


def vllm_bunched(vllm: dict) -> tuple[int, int]:
    if "ttfts" not in vllm:  # saved without --save-detailed
        return 0, 0
    pairs = [(t, sum(itl)) for t, itl in zip(vllm["ttfts"], vllm["itls"]) if t]
    return bunched(pairs), len(pairs)


def main(folder: Path) -> None:
    counters = read_counters(folder / "counters.jsonl")
    rounds = []
    for ours_path in sorted(folder.glob("ours-*/bench.json"), key=lambda p: int(p.parent.name[5:])):
        n = ours_path.parent.name[5:]
        vllm_path = folder / f"vllm-{n}.json"
        if not vllm_path.exists():
            continue  # the first round's prompts only
        result, vllm = json.loads(ours_path.read_text()), json.loads(vllm_path.read_text())
        diffs = {row["figure"]: row for row in vllm_comparison(BenchResult.from_dict(result), vllm)}
        vllm_engine = run_means_ms(counters, f"vllm-{n}") or {}
        engine = (result["levels"][0]["summary"].get("server_ttft_ms_mean"), vllm_engine.get("ttft"))
        rounds.append((n, diffs, ours_bunched(result), vllm_bunched(vllm), engine))
    head = (f"{'round':>5} " + "".join(f"{f:>28}" for f in FIGURES) + f"{'bunched ours / vLLM':>22}"
            + f"{'engine TTFT ms ours / vLLM':>28}")
    print(head)
    for n, diffs, (ob, on), (vb, vn), engine in rounds:
        cells = "".join(f"{diffs[f]['ours']:>9.2f} /{diffs[f]['vllm']:>8.2f} {diffs[f]['difference_percent']:>+7.1f}%"
                        for f in FIGURES)
        engine_cell = " / ".join("-" if v is None else f"{v:.1f}" for v in engine)
        print(f"{n:>5} {cells}{f'{ob}/{on} / {vb}/{vn}':>22}{engine_cell:>28}")
    for name, chosen in (("all rounds", rounds), ("clean rounds", [r for r in rounds if not r[2][0] and not r[3][0]])):
        if chosen:
            medians = "".join(f"{statistics.median(r[1][f]['difference_percent'] for r in chosen):>+27.1f}%"
                              for f in FIGURES)
            print(f"median difference, {name} ({len(chosen)}):\n      {medians}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
