"""Results: the table a person reads, the files a program reads, and the plots.

``bench.json`` holds everything (``BenchResult.as_dict``), ``requests.csv`` one
row per request, and the PNG plots are drawn from the saved JSON by ``plots``
(lazily: a GPU machine without matplotlib still saves the JSON).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Optional

from server.loadtest.bench.run import BenchResult
from server.loadtest.lib.stats import Distribution, percent_difference
from server.loadtest.lib.target import mostly_cached

CSV_FIELDS = ["concurrency", "index", "success", "prompt_tokens", "max_tokens", "output_tokens",
              "output_tokens_from", "start_s", "ttft_ms", "tpot_ms", "e2e_ms", "itl_mean_ms",
              "finish_reason", "error"]


def one_decimal(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.1f}"


def trio(d: Distribution) -> str:
    """mean/median/p99 as the table shows them."""
    return "/".join(one_decimal(v) for v in (d.mean, d.median, d.p99))


def render(result: BenchResult) -> str:
    """One line per concurrency level, vLLM's figures in its units."""
    head = (f"{'conc':>5} {'done':>5} {'fail':>5} {'req/s':>7} {'out tok/s':>10} {'tot tok/s':>10} "
            f"{'goodput':>8} | {'TTFT ms mean/p50/p99':>22} | {'TPOT ms mean/p50/p99':>20} | "
            f"{'ITL ms mean/p50/p99':>20} | {'E2E ms mean/p50/p99':>24}")
    lines = [head, "-" * len(head)]
    for level in result.levels:
        s = level.summary
        lines.append(
            f"{level.concurrency:>5} {s.completed:>5} {s.failed:>5} "
            f"{s.request_throughput:>7.2f} {s.output_throughput:>10.1f} "
            f"{s.total_token_throughput:>10.1f} {s.goodput:>8.2f} | {trio(s.ttft_ms):>22} | "
            f"{trio(s.tpot_ms):>20} | {trio(s.itl_ms):>20} | {trio(s.e2e_ms):>24}")
    slo = result.levels[0].summary.slo.describe() if result.levels else ""
    lines.append(f"goodput: requests/s with {slo}")
    cached = {l.concurrency: l.summary.prefix_cache_hit_rate for l in result.levels}
    if any(rate is not None for rate in cached.values()):
        lines.append("prompt tokens served from the prefix cache: " + ", ".join(
            f"{'-' if rate is None else f'{rate:.1%}'} at concurrency {c}" for c, rate in cached.items()))
    engine_side = [l for l in result.levels if l.summary.server_ttft_ms_mean is not None]
    if engine_side:
        lines.append("the engine's own view (vLLM's /metrics, timed from the tokenized request on: "
                     "the rest of the client's time is the HTTP front end and the network):")
        lines.append(f"{'conc':>5}  {'mean TTFT ms engine/client':>27}  {'queued ms':>9}  "
                     f"{'mean E2E ms engine/client':>26}")
        for level in engine_side:
            s = level.summary
            lines.append(f"{level.concurrency:>5}  {one_decimal(s.server_ttft_ms_mean):>12} / "
                         f"{one_decimal(s.ttft_ms.mean):<12}  {one_decimal(s.server_queue_ms_mean):>9}  "
                         f"{one_decimal(s.server_e2e_ms_mean):>11} / {one_decimal(s.e2e_ms.mean):<12}")
    for level in result.levels:
        if (rate := level.summary.spec_acceptance_rate) is not None:
            lines.append(f"speculative decoding at concurrency {level.concurrency}: {rate:.1%} of "
                         f"draft tokens accepted, {level.summary.spec_acceptance_length:.2f} tokens "
                         "per drafting step")
    if any(mostly_cached(l.summary) for l in result.levels):
        lines.append("WARNING: the server's prefix cache served many prompt tokens: TTFT is that "
                     "of cached prompts, not of new ones.")
    busy = [l.concurrency for l in result.levels if l.summary.client_cpu_fraction > 0.9]
    if busy:
        lines.append(f"WARNING: this client used over 90% of a CPU core at concurrency {busy}: "
                     "it may be the bottleneck, not the server.")
    return "\n".join(lines)


def csv_row(record: dict) -> dict:
    to_ms = lambda v: None if v is None else round(v * 1000, 3)
    itl = record["itl_s"]
    return {**{k: record[k] for k in CSV_FIELDS if k in record},
            "ttft_ms": to_ms(record["ttft_s"]), "tpot_ms": to_ms(record["tpot_s"]),
            "e2e_ms": to_ms(record["e2e_s"]), "start_s": round(record["start_s"], 4),
            "itl_mean_ms": to_ms(sum(itl) / len(itl)) if itl else None}


def save(result: BenchResult, out_dir: Path, plots: bool = True, out=print) -> list[Path]:
    """bench.json (everything), requests.csv (one row per request) and the PNG plots."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = out_dir / "bench.json", out_dir / "requests.csv"
    saved = result.as_dict()
    json_path.write_text(json.dumps(saved, indent=1) + "\n", encoding="utf-8")
    with open(csv_path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for level in result.levels:
            writer.writerows(csv_row(r) for r in level.records)
    return [json_path, csv_path] + (draw_plots(saved, out_dir, out) if plots else [])


def draw_plots(saved: dict, out_dir: Path, out=print) -> list[Path]:
    """The plots of a result as saved in bench.json."""
    try:
        from server.loadtest.lib import plots
    except ImportError as exc:  # the GPU machine has no matplotlib: draw them later
        out(f"[bench] plots skipped ({exc}); draw them elsewhere with "
            f"`ernie-chat bench --plot-only {out_dir / 'bench.json'}`")
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    return plots.plot_bench(saved, out_dir)


def vllm_comparison(result: BenchResult, vllm: dict) -> list[dict]:
    """Our figures next to a `vllm bench serve --save-result` JSON of the same load."""
    concurrency = vllm.get("max_concurrency")
    level = next((l for l in result.levels if l.concurrency == concurrency), result.levels[-1])
    s = level.summary
    pairs = [("request throughput (req/s)", s.request_throughput, vllm.get("request_throughput")),
             ("output throughput (tok/s)", s.output_throughput, vllm.get("output_throughput")),
             ("total token throughput (tok/s)", s.total_token_throughput,
              vllm.get("total_token_throughput")),
             ("mean TTFT (ms)", s.ttft_ms.mean, vllm.get("mean_ttft_ms")),
             ("median TTFT (ms)", s.ttft_ms.median, vllm.get("median_ttft_ms")),
             ("mean TPOT (ms)", s.tpot_ms.mean, vllm.get("mean_tpot_ms")),
             ("mean ITL (ms)", s.itl_ms.mean, vllm.get("mean_itl_ms")),
             ("mean E2E (ms)", s.e2e_ms.mean, vllm.get("mean_e2el_ms"))]
    # vLLM saves E2E only with --percentile-metrics ...,e2el.
    return [{"figure": name, "ours": ours, "vllm": theirs,
             "difference_percent": percent_difference(ours, theirs)}
            for name, ours, theirs in pairs if theirs is not None]


def render_comparison(rows: list[dict]) -> str:
    lines = [f"{'figure':<32}{'ours':>12}{'vllm bench':>12}{'diff':>9}"]
    for row in rows:
        diff = "-" if row["difference_percent"] is None else f"{row['difference_percent']:+.1f}%"
        ours, theirs = one_decimal(row["ours"]), one_decimal(row["vllm"])
        lines.append(f"{row['figure']:<32}{ours:>12}{theirs:>12}{diff:>9}")
    return "\n".join(lines)
