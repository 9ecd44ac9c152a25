"""Draw the H200 goodput figures of docs/performance.md ("Memory settings",
"Earlier runs with cached prompts") from the runs' tune.json.

    .venv/bin/python benchmarks/gpu/plot_runs.py fresh      # docs/gpu-fresh.png
    .venv/bin/python benchmarks/gpu/plot_runs.py recheck    # docs/gpu-recheck.png (cached prompts)

One bar per setting (the mean of its runs), each run a dot: run-to-run spread is part of
the result.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "benchmarks" / "gpu" / "h200"
NAMES = {  # tune's point label -> what it is
    "len 131072, util 0.9": "defaults\n131072\n0.9",
    "len 2048, util 0.85": "seed\n2048\n0.85",
    "len 4096, util 0.88": "seed\n4096\n0.88",
    "len 8192, util 0.82": "seed\n8192\n0.82",
    "len 8192, util 0.9": "8192\n0.9",
    "len 8192, util 0.9, seqs 256": "8192\n0.9\nseqs 256",
    "len 8192, util 0.9, seqs 128": "8192\n0.9\nseqs 128",
}
# which runs, the picture, and what its prompts were
SETS = {
    "fresh": ("fresh-*/tune.json", "gpu-fresh.png", "prompts that differ (2026-12-01)"),
    "recheck": ("re*/tune.json", "gpu-recheck.png",
                "prompts served from the prefix cache (2026-11-30, superseded)"),
}
PANELS = (("output_throughput", "output tokens/s"),
          ("goodput", "goodput, requests/s (TTFT <= 1 s, TPOT <= 25 ms)"),
          ("ttft_p50_ms", "TTFT p50, ms"))


def figures(summary: dict) -> dict:
    return {**summary, "ttft_p50_ms": summary["ttft_ms"]["median"]}


def main(which: str) -> None:
    pattern, picture, prompts = SETS[which]
    runs: dict[str, list[dict]] = defaultdict(list)
    for path in sorted(RUNS.glob(pattern)):
        for point in json.loads(path.read_text())["points"]:
            runs[point["label"]].append(figures(point["summary"]))
    labels = [label for label in NAMES if label in runs]
    fig, axes = plt.subplots(1, len(PANELS), figsize=(5.2 * len(PANELS), 4.4))
    for ax, (key, title) in zip(axes, PANELS):
        for i, label in enumerate(labels):
            values = [s[key] for s in runs[label]]
            ax.bar(i, sum(values) / len(values), color="#8fb3d9")
            ax.plot([i] * len(values), values, "o", color="#1f4e79")
        ax.set_xticks(range(len(labels)), [NAMES[l] for l in labels], fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("ERNIE-4.5-0.3B shape on one H200, vLLM 0.26: 768 requests, 1,024 in / 256 out, "
                 f"256 clients; {prompts} (bars: mean, dots: runs)", fontsize=10)
    fig.tight_layout()
    out = ROOT / "docs" / picture
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fresh")
