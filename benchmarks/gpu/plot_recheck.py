"""Draw docs/gpu-recheck.png from the recheck/repeat runs' tune.json (benchmarks/gpu/h200).

    .venv/bin/python benchmarks/gpu/plot_recheck.py

One bar per setting (the mean of its runs), each run a dot: run-to-run spread is part of
the result.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "benchmarks" / "gpu" / "h200"
NAMES = {  # tune's point label -> what it is
    "len 131072, util 0.9": "vLLM defaults\n(131072, 0.9)",
    "len 8192, util 0.82": "seed 8192 / 0.82\n(default seqs)",
    "len 8192, util 0.9, seqs 256": "max-num-seqs 256\n(8192, 0.9)",
    "len 8192, util 0.9, seqs 128": "max-num-seqs 128\n(8192, 0.9)",
}


def main() -> None:
    runs: dict[str, list[dict]] = defaultdict(list)
    for path in sorted(RUNS.glob("re*/tune.json")):
        for point in json.loads(path.read_text())["points"]:
            runs[point["label"]].append(point["summary"])
    labels = [label for label in NAMES if label in runs]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, title in ((axes[0], "output_throughput", "output tokens/s"),
                           (axes[1], "goodput", "goodput, requests/s (TTFT <= 1 s, TPOT <= 25 ms)")):
        for i, label in enumerate(labels):
            values = [s[key] for s in runs[label]]
            ax.bar(i, sum(values) / len(values), color="#8fb3d9")
            ax.plot([i] * len(values), values, "o", color="#1f4e79")
        ax.set_xticks(range(len(labels)), [NAMES[l] for l in labels], fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("ERNIE-4.5-0.3B shape on one H200, vLLM 0.26: 768 requests, 1,024 in / 256 out, "
                 "256 clients (bars: mean, dots: runs)", fontsize=10)
    fig.tight_layout()
    out = ROOT / "docs" / "gpu-recheck.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
