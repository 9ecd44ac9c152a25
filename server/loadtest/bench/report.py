"""Results: the table a person reads, the files a program reads, the plots and the report.

``bench.json`` holds everything (``BenchResult.as_dict``), ``requests.csv`` one
row per request, and the PNG plots are drawn from the saved JSON by ``plots``
(lazily: a GPU machine without matplotlib still saves the JSON). ``report.html``
(``lib.html_report``) is built from the saved JSON too: the verdict, the figures, the plots.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Optional

from server.loadtest.bench.run import BenchResult
from server.loadtest.lib.html_report import Report, number
from server.loadtest.lib.stats import Distribution, percent_difference
from server.loadtest.lib.target import mostly_cached

CSV_FIELDS = ["concurrency", "index", "success", "prompt_tokens", "max_tokens", "output_tokens",
              "output_tokens_from", "arrival_s", "start_s", "ttft_ms", "tpot_ms", "e2e_ms", "itl_mean_ms",
              "finish_reason", "error"]


def one_decimal(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.1f}"


def trio(d: Distribution) -> str:
    """mean/median/p99 as the table shows them."""
    return "/".join(one_decimal(v) for v in (d.mean, d.median, d.p99))


def loop_text(params: dict) -> str:
    """How the load was sent, in words: the closed loop or the open loop's rate."""
    if not params.get("open_loop"):
        return "closed loop: each level keeps --concurrency requests in flight"
    cap = ("no limit on the requests in flight" if params.get("uncapped")
           else "at most --concurrency in flight")
    return (f"open loop: requests arrive at {params['request_rate']:g}/s (burstiness "
            f"{params.get('burstiness')}, {'Poisson' if params.get('burstiness') == 1 else 'gamma'} "
            f"arrivals), {cap}")


def open_loop_lines(result: BenchResult) -> list[str]:
    lines = []
    for level in result.levels:
        s = level.summary
        if s.open_loop:
            where = "" if result.params.get("uncapped") else f" at concurrency {level.concurrency}"
            lines.append(f"request rate{where}: {s.request_rate:g}/s asked, "
                         f"{one_decimal(s.achieved_request_rate)}/s achieved; mean inter-arrival "
                         f"{one_decimal(s.mean_interarrival_ms)} ms, mean wait for a slot "
                         f"{one_decimal(s.client_wait_ms_mean)} ms")
    return lines


def render(result: BenchResult) -> str:
    """One line per concurrency level, vLLM's figures in its units."""
    head = (f"{'conc':>5} {'done':>5} {'fail':>5} {'req/s':>7} {'out tok/s':>10} {'tot tok/s':>10} "
            f"{'goodput':>8} | {'TTFT ms mean/p50/p99':>22} | {'TPOT ms mean/p50/p99':>20} | "
            f"{'ITL ms mean/p50/p99':>20} | {'E2E ms mean/p50/p99':>24}")
    lines = [loop_text(result.params), head, "-" * len(head)]
    for level in result.levels:
        s = level.summary
        lines.append(
            f"{level.concurrency:>5} {s.completed:>5} {s.failed:>5} "
            f"{s.request_throughput:>7.2f} {s.output_throughput:>10.1f} "
            f"{s.total_token_throughput:>10.1f} {s.goodput:>8.2f} | {trio(s.ttft_ms):>22} | "
            f"{trio(s.tpot_ms):>20} | {trio(s.itl_ms):>20} | {trio(s.e2e_ms):>24}")
    slo = result.levels[0].summary.slo.describe() if result.levels else ""
    lines.append(f"goodput: requests/s with {slo}")
    lines += open_loop_lines(result)
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
            "arrival_s": None if record.get("arrival_s") is None else round(record["arrival_s"], 4),
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
    pngs = draw_plots(saved, out_dir, out) if plots else []
    return [json_path, csv_path, *pngs, html_report(saved, out_dir)]


PLOTS = ("latency-vs-throughput.png", "ttft-tpot-distributions.png")
SLO_MET_SHARE = 0.99  # the report says an SLO is met where 99% of the requests meet it


def verdict(result: BenchResult) -> tuple[str, bool]:
    """The report's first line and whether it is good news: every request completed, and
    with an SLO, the share of requests that met it at each level."""
    levels = result.levels
    if not levels:
        return "No level ran (time limit reached before the first).", False
    asked = sum(l.summary.requests + l.summary.not_sent for l in levels)
    done = result.completed
    ok = done == asked
    parts = [f"{done} of {asked} requests completed"]
    slo = levels[0].summary.slo
    if slo.any:
        shares = [(l, l.summary.goodput / l.summary.request_throughput
                   if l.summary.request_throughput else 0.0) for l in levels]
        met = all(share >= SLO_MET_SHARE for _, share in shares)
        ok = ok and met
        parts.append(f"SLO ({slo.describe()}) {'met' if met else 'NOT met'}: " + ", ".join(
            f"{share:.0%} of requests within it at concurrency {l.concurrency}" for l, share in shares))
    loop = levels[0].summary
    if loop.open_loop:
        parts.append(f"open loop at {loop.request_rate:g} req/s asked, "
                     f"{number(loop.achieved_request_rate, 2)} achieved")
    return "; ".join(parts) + ".", ok


def html_report(saved: dict, out_dir: Path) -> Path:
    """report.html of a result as saved in bench.json, with the plots found beside it."""
    result = BenchResult.from_dict(saved)
    text, ok = verdict(result)
    params, target = result.params, result.target
    load = params.get("load", {})
    page = Report(f"bench: {target.get('model')} at {target.get('url')}", text, ok,
                  f"started {result.started}")
    page.facts("The run", [
        ("how the load was sent", loop_text(params)),
        ("model", target.get("model")), ("server", target.get("url")),
        ("max_model_len", target.get("max_model_len")),
        ("requests per level", load.get("num_prompts")),
        ("prompt / reply tokens", f"{load.get('input_len')} / {load.get('output_len')} "
                                  f"(range ratio {load.get('range_ratio')})"),
        ("request rate asked", params.get("request_rate") if params.get("open_loop") else "inf (closed loop)"),
        ("burstiness", params.get("burstiness") if params.get("open_loop") else "-"),
        ("client processes", params.get("processes")), ("seed", load.get("seed")),
        ("command", result.extra.get("command_line", "-"))])
    page.table("Figures per level (times in ms: mean / p50 / p99)",
               ["concurrency", "done", "failed", "not sent", "req/s", "out tok/s", "goodput",
                "TTFT", "TPOT", "ITL", "E2E", "rate asked", "rate achieved",
                "mean inter-arrival ms", "mean wait for a slot ms"],
               [[l.concurrency if not params.get("uncapped") else f"{l.concurrency} (no cap)",
                 l.summary.completed, l.summary.failed, l.summary.not_sent,
                 number(l.summary.request_throughput, 2), number(l.summary.output_throughput),
                 number(l.summary.goodput, 2), trio(l.summary.ttft_ms), trio(l.summary.tpot_ms),
                 trio(l.summary.itl_ms), trio(l.summary.e2e_ms),
                 "-" if l.summary.request_rate is None else f"{l.summary.request_rate:g}",
                 number(l.summary.achieved_request_rate, 2), number(l.summary.mean_interarrival_ms),
                 number(l.summary.client_wait_ms_mean)] for l in result.levels],
               note=f"goodput: requests/s with {result.levels[0].summary.slo.describe()}"
               if result.levels else "")
    page.text("Warnings", [line for line in render(result).splitlines() if line.startswith("WARNING")],
              warn=True)
    errors = sorted({r.get("error") for l in result.levels for r in l.records if r.get("error")})
    page.text("Errors (each kind once)", errors[:20], warn=True)
    if result.extra.get("vllm_comparison"):
        page.pre("Compared with vllm bench serve", render_comparison(result.extra["vllm_comparison"]))
    page.images("Plots", [out_dir / name for name in PLOTS])
    page.pre("The table as printed", render(result))
    return page.write(out_dir)


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
