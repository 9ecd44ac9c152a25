"""``ernie-chat bench``: a streaming load generator for any OpenAI-compatible server.

It sends prompts of known token counts to ``/v1/completions`` with a fixed
number in flight (a closed loop, like ``vllm bench serve --max-concurrency``
with its default infinite request rate), times every streamed chunk and
reports what a user of the server feels: TTFT, TPOT, ITL, end-to-end latency,
throughput and goodput under SLOs.  Definitions are vLLM's (see bench_stats),
so the two tools can be checked against each other (benchmarks/cpu-vs-vllm-bench.md).

Plain completions, not chat, because their prompt is exactly the text sent:
its length in tokens is counted by the server's own tokenizer (``POST
/tokenize``), and no chat template adds tokens we did not count.

The load is bounded by a number of requests and by ``--max-seconds``, and goes
to one URL only: the engine of our settings (which must be on this machine) or
the one given with ``--url``.  The streams are read on plain asyncio
connections (StreamConnection: a busy client would measure itself), the few
calls before the load go through httpx.  This module and bench_stats import
only the standard library, httpx and our settings, so they also run on a GPU
machine that has vLLM but not our app environment; plots are drawn by
plots, which is imported only when they are wanted (or later:
``--plot-only``).

The parts, in the order a request meets them: ``config`` (what is sent),
``target`` (the server), ``prompts`` (exact lengths), ``stream`` (one request on
the wire), ``workers`` (the closed loop of a level), ``run`` (levels of
concurrency; ``bench_processes`` when a level is shared over client processes),
``stats`` (the figures), ``report`` (table, files, plots).  This module is only
the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Optional

from server.loadtest.client_processes import MAX_PROCESSES
from server.loadtest.config import BenchConfig, BenchError, Load
from server.loadtest.report import draw_plots, render, render_comparison, save, vllm_comparison
from server.loadtest.run import BenchResult, run_bench
from server.loadtest.stats import Slo
from server.loadtest.target import check_target
from server.paths import RESULTS_DIR


def int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("every value must be at least 1")
    return values


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that describe the load; `tune` runs the same load at every point."""
    load = parser.add_argument_group("load")
    load.add_argument("--concurrency", type=int_list, default=(4,),
                      help="requests in flight; a comma list sweeps (1,4,16). Default 4")
    load.add_argument("--num-prompts", type=int, default=Load.num_prompts,
                      help=f"requests per concurrency level (default {Load.num_prompts})")
    load.add_argument("--input-len", type=int, default=Load.input_len,
                      help=f"prompt tokens (default {Load.input_len})")
    load.add_argument("--output-len", type=int, default=Load.output_len,
                      help=f"reply tokens, max_tokens (default {Load.output_len})")
    load.add_argument("--range-ratio", type=float, default=0.0,
                      help="draw lengths uniformly in [len x (1-r), len x (1+r)], as vLLM")
    load.add_argument("--from-usage", nargs="?", const="", metavar="FILE",
                      help="draw (prompt, reply) lengths from recorded chats (default ERNIE_USAGE_LOG)")
    load.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                      help="let replies end at EOS (default: send ignore_eos so every reply is "
                           "--output-len long)")
    load.add_argument("--temperature", type=float, help="default: the server's")
    load.add_argument("--top-p", type=float,
                      help="default: the server's. The chat sends ERNIE_TOP_P (0.9), which makes "
                           "vLLM run a top-p sampling kernel every step: give --temperature 0.7 "
                           "--top-p 0.9 to load vLLM as the chat does")
    load.add_argument("--slo-ttft-ms", type=float, help="goodput counts requests with TTFT at most this")
    load.add_argument("--slo-tpot-ms", type=float, help="goodput counts requests with TPOT at most this")
    load.add_argument("--max-seconds", type=float, default=600.0,
                      help="stop the load after this long; requests still running are cancelled "
                           "(default 600)")
    load.add_argument("--request-timeout-s", type=float, default=300.0,
                      help="give up on a request after this long without a chunk (default 300)")
    load.add_argument("--warmup", type=int, default=1, help="unmeasured requests first (default 1)")
    load.add_argument("--processes", type=int, default=1,
                      help="client processes that share each level's requests and send at once "
                           "(default 1; one process reading a thousand streams measures itself: "
                           "give 4 for 1,000 in flight, as qa-load --processes)")
    load.add_argument("--seed", type=int, default=0)


def config_from_args(args: argparse.Namespace, settings, url: str, model: Optional[str] = None,
                     api_key: Optional[str] = None) -> BenchConfig:
    from_usage = None
    if args.from_usage is not None:
        from_usage = Path(args.from_usage) if args.from_usage else settings.usage_log
    if args.num_prompts < 1 or args.input_len < 1 or args.output_len < 1 or args.max_seconds <= 0:
        raise BenchError("--num-prompts, --input-len, --output-len and --max-seconds must be positive.")
    if not 0 <= args.range_ratio < 1:
        raise BenchError("--range-ratio must be in [0, 1).")
    if args.top_p is not None and not 0 < args.top_p <= 1:
        raise BenchError(f"--top-p must be in (0, 1] (got {args.top_p}).")
    if not 1 <= args.processes <= MAX_PROCESSES:
        raise BenchError(f"--processes must be between 1 and {MAX_PROCESSES} (got {args.processes}).")
    if args.processes > min(args.concurrency):
        raise BenchError(f"--processes {args.processes} is more than --concurrency {min(args.concurrency)}: "
                         "each client process needs at least one request in flight.")
    return BenchConfig(
        url=url.rstrip("/").removesuffix("/v1"), api_key=api_key, model=model,
        concurrencies=args.concurrency,
        load=Load(args.num_prompts, args.input_len, args.output_len, args.range_ratio,
                  from_usage, args.seed),
        ignore_eos=args.ignore_eos, max_seconds=args.max_seconds,
        request_timeout_s=args.request_timeout_s, warmup=max(0, args.warmup),
        temperature=args.temperature, top_p=args.top_p, slo=Slo(args.slo_ttft_ms, args.slo_tpot_ms),
        processes=args.processes)


def add_parser(sub) -> None:
    bench = sub.add_parser(
        "bench", help="load-test the engine (TTFT, TPOT, throughput, goodput)",
        description="Streaming load test against an OpenAI-compatible server: our engine "
        "(ERNIE_ENGINE_URL / port) or --url. Writes bench.json, requests.csv and PNG plots.")
    bench.add_argument("--url", help="server base URL (default: the engine of the settings)")
    bench.add_argument("--model", help="served model name (default: the server's first model)")
    bench.add_argument("--api-key", help="default: ERNIE_API_KEY")
    bench.add_argument("--out", type=Path, help="results folder (default benchmarks/results/<time>/)")
    bench.add_argument("--no-plots", action="store_true", help="write JSON and CSV only")
    bench.add_argument("--save-prompts", action="store_true",
                       help="also write prompts.json, the measured prompts, so that `vllm bench "
                       "serve --dataset-name sharegpt --dataset-path prompts.json "
                       "--sharegpt-output-len N --disable-shuffle` sends the same load")
    bench.add_argument("--plot-only", type=Path, metavar="RESULT.json",
                       help="draw the plots (and print the table) of a saved result; sends nothing")
    bench.add_argument("--compare-vllm", type=Path, metavar="VLLM.json",
                       help="compare with a `vllm bench serve --save-result` JSON of the same load")
    bench.add_argument("--app-overhead", action="store_true",
                       help="instead of a load test: time the chat app's streaming path against "
                            "reading the engine's stream directly")
    bench.add_argument("--repetitions", type=int, default=10,
                       help="--app-overhead: alternating runs of each path (default 10); "
                            "--app-cost: runs per number of chats (give 3 or more)")
    cost = bench.add_argument_group("--app-cost: the chat app's CPU per 1,000 streamed tokens")
    cost.add_argument("--app-cost", action="store_true",
                      help="instead of a load test: start the chat app on the engine, stream "
                           "--output-len-token replies to --concurrency chats at once (qa-load), "
                           "and print the app's CPU-seconds per 1,000 tokens")
    cost.add_argument("--app-root", type=Path, default=None,
                      help="run the app of this checkout (default: this one)")
    cost.add_argument("--app-env", action="append", default=[], metavar="NAME=VALUE",
                      help="an environment variable for the app process (repeatable)")
    cost.add_argument("--baseline-root", type=Path, default=None,
                      help="also run the app of this checkout (e.g. main's), in turn with the "
                           "first, and print the ratio")
    cost.add_argument("--baseline-env", action="append", default=[], metavar="NAME=VALUE",
                      help="an environment variable for the baseline app (repeatable)")
    cost.add_argument("--profile", action="store_true",
                      help="also record a py-spy flame graph per app and number of chats")
    cost.add_argument("--label", default="this checkout", help="a name for the app measured")
    add_load_arguments(bench)
    bench.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    # Read first: a typo in its path should not cost a whole run.
    vllm = load_json(args.compare_vllm, "--compare-vllm") if args.compare_vllm else None
    if args.plot_only:
        return show_saved(load_json(args.plot_only, "--plot-only"), vllm, args)
    from server.settings import load_settings
    settings = load_settings()
    url = args.url or settings.engine_base_url
    check_target(url, explicit=bool(args.url))
    cfg = config_from_args(args, settings, url, args.model, args.api_key or settings.api_key_value)
    out_dir = args.out or RESULTS_DIR / time.strftime("%Y%m%d-%H%M%S")
    if args.app_overhead:
        from server.loadtest import app_overhead
        return app_overhead.run(cfg, settings, args.repetitions, out_dir)
    if args.app_cost:
        from server.loadtest import app_cost
        from server.paths import ROOT
        variants = [app_cost.Variant(args.label, (args.app_root or ROOT).resolve(),
                                     app_cost.parse_env(args.app_env))]
        if args.baseline_root:
            variants.append(app_cost.Variant("baseline", args.baseline_root.resolve(),
                                             app_cost.parse_env(args.baseline_env)))
        return app_cost.run(cfg.url, cfg.concurrencies, cfg.load.output_len, args.repetitions,
                            variants, out_dir, args.profile)
    result = asyncio.run(run_bench(cfg, prompts_file=out_dir / "prompts.json"
                                   if args.save_prompts else None))
    result.extra["command_line"] = shlex.join(sys.argv)
    result.extra["arguments"] = {k: str(v) if isinstance(v, Path) else v
                                 for k, v in vars(args).items() if k not in ("func", "api_key")}
    print(render(result))
    if vllm is not None:
        result.extra["vllm_comparison"] = vllm_comparison(result, vllm)
        print("\n" + render_comparison(result.extra["vllm_comparison"]))
    for path in save(result, out_dir, plots=not args.no_plots):
        print(f"wrote {path}")
    return 0 if result.completed else 1


def load_json(path: Path, flag: str) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BenchError(f"{flag} {path}: cannot read it as JSON ({exc})") from None


def show_saved(saved: dict, vllm: Optional[dict], args: argparse.Namespace) -> int:
    """--plot-only: the table and plots of an earlier run, e.g. one made on a GPU machine."""
    result = BenchResult.from_dict(saved)
    print(render(result))
    if vllm is not None:
        print("\n" + render_comparison(vllm_comparison(result, vllm)))
    for path in draw_plots(saved, args.out or args.plot_only.parent):
        print(f"wrote {path}")
    return 0
