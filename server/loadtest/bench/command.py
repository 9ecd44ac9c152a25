"""``ernie-chat bench``: a streaming load generator for any OpenAI-compatible server.

It sends prompts of known token counts to ``/v1/completions`` with a fixed
number in flight (a closed loop, like ``vllm bench serve --max-concurrency``
with its default infinite request rate), times every streamed chunk and
reports what a user of the server feels: TTFT, TPOT, ITL, end-to-end latency,
throughput and goodput under SLOs.  With ``--request-rate R [--burstiness B]`` the load
is an open loop instead, with vLLM's meaning: requests arrive at R per second (gamma
gaps, Poisson at B = 1, ``lib.arrivals``) whatever the server's pace, and
``--concurrency`` is then vLLM's ``--max-concurrency`` (no limit when not given).  Definitions are vLLM's (``lib.stats``),
so the two tools can be checked against each other (benchmarks/cpu-vs-vllm-bench.md).

Plain completions, not chat, because their prompt is exactly the text sent:
its length in tokens is counted by the server's own tokenizer (``POST
/tokenize``), and no chat template adds tokens we did not count.

The load is bounded by a number of requests and by ``--max-seconds``, and goes
to one URL only: the engine of our settings (which must be on this machine) or
the one given with ``--url``.  The streams are read on plain asyncio
connections (StreamConnection: a busy client would measure itself), the few
calls before the load go through httpx.  This package and ``lib`` import
only the standard library, httpx and our settings, so they also run on a GPU
machine that has vLLM but not our app environment; plots are drawn by
``lib.plots``, which is imported only when they are wanted (or later:
``--plot-only``).

The parts, in the order a request meets them, in ``lib``: ``config`` (what is
sent), ``target`` (the server), ``prompts`` (exact lengths), ``arrivals`` (the open
loop's schedule), ``stream`` (one request on the wire), ``stats`` (the figures),
``html_report`` (report.html's frame); here: ``workers`` (the closed or open loop of a
level), ``run`` (levels of concurrency; ``processes`` when a level is shared over client
processes) and ``report`` (table, files, plots, report.html).  This
module is only the command line; ``--app-cost`` and ``--app-overhead`` are the
chat package's (``chat.bench_modes``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
from pathlib import Path
from typing import Optional

from server.loadtest.bench.report import (draw_plots, html_report, render, render_comparison, save,
                                          vllm_comparison)
from server.loadtest.bench.run import BenchResult, run_bench
from server.loadtest.lib.config import BenchError
from server.loadtest.lib.load_args import add_load_arguments, engine_config, results_folder


def add_parser(sub) -> argparse.ArgumentParser:
    bench = sub.add_parser(
        "bench", help="load-test the engine (TTFT, TPOT, throughput, goodput)",
        description="Streaming load test against an OpenAI-compatible server: our engine "
        "(ERNIE_ENGINE_URL / port) or --url. Writes bench.json, requests.csv, PNG plots and report.html.")
    bench.add_argument("--url", help="server base URL (default: the engine of the settings)")
    bench.add_argument("--model", help="the model of the settings (its served name or its name "
                       "in ERNIE_MODELS): its engine is loaded; with --url, the served name to send "
                       "(default: the first model)")
    bench.add_argument("--api-key", help="default: ERNIE_API_KEY")
    bench.add_argument("--out", type=Path, help="results folder (default benchmarks/results/<time>/)")
    bench.add_argument("--no-plots", action="store_true", help="write JSON and CSV only")
    bench.add_argument("--save-prompts", action="store_true",
                       help="also write prompts.json, the measured prompts, so that `vllm bench "
                       "serve --dataset-name sharegpt --dataset-path prompts.json "
                       "--sharegpt-output-len N --disable-shuffle` sends the same load")
    bench.add_argument("--plot-only", type=Path, metavar="RESULT.json",
                       help="draw the plots and report.html (and print the table) of a saved result; "
                       "sends nothing")
    bench.add_argument("--compare-vllm", type=Path, metavar="VLLM.json",
                       help="compare with a `vllm bench serve --save-result` JSON of the same load")
    add_load_arguments(bench, open_loop=True)
    bench.set_defaults(func=cmd_bench)
    return bench


def cmd_bench(args: argparse.Namespace) -> int:
    # Read first: a typo in its path should not cost a whole run.
    vllm = load_json(args.compare_vllm, "--compare-vllm") if args.compare_vllm else None
    if args.plot_only:
        return show_saved(load_json(args.plot_only, "--plot-only"), vllm, args)
    _, cfg = engine_config(args)
    out_dir = results_folder(args.out)
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
    folder = args.out or args.plot_only.parent
    for path in [*draw_plots(saved, folder), html_report(saved, folder)]:
        print(f"wrote {path}")
    return 0
