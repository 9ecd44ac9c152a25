"""PNG plots of the tools' results (bench, tune, users, capacity), drawn from their saved JSON.

The only module of the load tools that needs matplotlib, imported lazily: a GPU
machine without it runs the load and saves JSON, and the plots are drawn here
later with ``ernie-chat bench --plot-only RESULT.json``.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers and CI

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402  (matplotlib's own dependency)

MS = 1000.0


def plot_bench(result: dict, out_dir: Path) -> list[Path]:
    return [latency_vs_throughput(result, out_dir / "latency-vs-throughput.png"),
            distributions(result, out_dir / "ttft-tpot-distributions.png")]


def latency_vs_throughput(result: dict, path: Path) -> Path:
    """The serving curve: what each concurrency level buys in throughput and costs in latency."""
    levels = result["levels"]
    x = [l["summary"]["output_throughput"] for l in levels]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, key, name in zip(axes, ("ttft_ms", "tpot_ms", "e2e_ms"), ("TTFT", "TPOT", "E2E latency")):
        for stat, style in (("median", "o-"), ("p99", "s--")):
            y = [l["summary"][key][stat] for l in levels]
            ax.plot(x, [v if v is not None else float("nan") for v in y], style, label=stat)
        for level, xi in zip(levels, x):
            y = level["summary"][key]["median"]
            if y is not None:
                ax.annotate(f"c={level['concurrency']}", (xi, y), textcoords="offset points",
                            xytext=(4, 4), fontsize=8)
        ax.set_xlabel("output throughput (tokens/s)")
        ax.set_ylabel(f"{name} (ms)")
        ax.set_title(f"{name} vs throughput")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"{result['target']['model']} at {result['target']['url']}, {loop_title(result)}")
    return _save(fig, path)


def loop_title(result: dict) -> str:
    """Closed or open loop, as a plot's title says it (c= is the cap of an open loop)."""
    params = result.get("params", {})
    if not params.get("open_loop"):
        return "closed loop (c = requests in flight)"
    cap = "no cap" if params.get("uncapped") else "c = most in flight"
    return f"open loop at {params['request_rate']:g} req/s, burstiness {params.get('burstiness')} ({cap})"


def distributions(result: dict, path: Path) -> Path:
    """Histograms of TTFT and TPOT per concurrency level: the tails the means hide."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    fig.suptitle(loop_title(result), fontsize=10)
    for ax, key, name in zip(axes, ("ttft_s", "tpot_s"), ("TTFT", "TPOT")):
        series = [(level["concurrency"], [r[key] * MS for r in level["records"]
                                          if r["success"] and r[key] is not None])
                  for level in result["levels"]]
        every = [v for _, values in series for v in values]
        # The same bins for every level, so their shapes can be compared.
        bins = np.linspace(min(every), max(every), 31) if every else 30
        for concurrency, values in series:
            if values:
                ax.hist(values, bins=bins, alpha=0.5, label=f"c={concurrency} (n={len(values)})")
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel("requests")
        ax.set_title(f"{name} distribution")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    return _save(fig, path)


def plot_tune(points: list[dict], panels: list[tuple[str, str]], need: int, path: Path,
              shared: str = "") -> Path:
    """One panel per (figure key, heading) of ``panels``: each point's mean as a bar with its
    standard deviation as an error bar and every run as a dot; the chosen point green, ones
    that cannot serve the need grey. A point gives its ``runs`` and their ``spread`` (n, mean,
    sd) per figure key; ``shared``: what every point has (their labels leave it out); one that
    missed tune's users objective orange."""
    colors = {"chosen": "tab:green", "eligible": "tab:blue", "missed the objective": "tab:orange",
              "too short": "tab:gray", "failed": "tab:red", "not run": "lightgray"}
    panel_width = max(3.0, 1.2 * len(points) + 0.8)
    fig, axes = plt.subplots(1, len(panels), squeeze=False,
                             figsize=(panel_width * len(panels) + 1.5, 5))
    labels = ["\n".join(textwrap.wrap(p["label"], 18)) for p in points]
    for ax, (key, heading) in zip(axes[0], panels):
        for i, point in enumerate(points):
            runs, s = point["runs"][key], point["spread"].get(key)
            if s is None:
                if point["role"] in ("failed", "not run"):
                    ax.annotate(point["role"], (i, 0), ha="center", va="bottom", rotation=90, fontsize=8)
                continue
            ax.bar(i, s["mean"], color=colors[point["role"]], alpha=0.75,
                   yerr=s["sd"] if s["n"] > 1 else None, capsize=4)
            ax.plot([i] * len(runs), runs, "o", color="black", markersize=3)
        ax.set_xticks(range(len(points)), labels, fontsize=7)
        ax.set_title(heading, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    roles = [r for r in colors if any(p["role"] == r for p in points)]
    axes[0][-1].legend(handles=[plt.Rectangle((0, 0), 1, 1, color=colors[r]) for r in roles],
                       labels=roles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    every = f"every point: {shared}; " if shared else ""
    fig.suptitle(f"tune: mean of the runs, error bar 1 sd, dots the runs ({every}the choice must "
                 f"serve {need} tokens)", fontsize=10)
    return _save(fig, path)


def timeline(rows: list[dict], title: str, path: Path) -> Path:
    """A user-model run second by second: users present, tokens/s, TTFT p50 and p99."""
    t = [row["second"] for row in rows]
    nan = lambda v: float("nan") if v is None else v
    fig, axes = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
    axes[0].step(t, [row["users_active"] for row in rows], where="post", color="tab:gray")
    axes[0].set_ylabel("users present")
    axes[1].plot(t, [row["tokens"] for row in rows], color="tab:blue")
    axes[1].set_ylabel("tokens/s (streamed)")
    for stat, style in (("ttft_ms_p50", "o-"), ("ttft_ms_p99", "s--")):
        axes[2].plot(t, [nan(row[stat]) for row in rows], style, markersize=3, label=stat[8:])
    axes[2].set_ylabel("TTFT (ms)")
    axes[2].set_xlabel("seconds from the start (TTFT by the second of the first token)")
    axes[2].legend()
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].set_title(title)
    return _save(fig, path)


def capacity(steps: list[dict], objective: dict, title: str, path: Path) -> Path:
    """Each step of the capacity search: TTFT p99 and per-user tokens/s p10 against the objective."""
    steps = sorted(steps, key=lambda s: s["users"])
    users = [s["users"] for s in steps]
    colors = ["tab:green" if s["pass"] else "tab:red" for s in steps]
    nan = lambda v: float("nan") if v is None else v
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, key, limit, name in (
            (axes[0], "ttft_ms_p99", objective["ttft_p99_ms"], "TTFT p99 (ms)"),
            (axes[1], "user_tokens_per_s_p10", objective["tokens_per_s"], "per-user tokens/s, p10")):
        ax.plot(users, [nan(s[key]) for s in steps], "-", color="tab:gray", alpha=0.5)
        ax.scatter(users, [nan(s[key]) for s in steps], c=colors, zorder=3)
        ax.axhline(limit, color="black", linestyle=":", label=f"objective {limit:g}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("simultaneous users")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title + "  (green: within the objective)")
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
