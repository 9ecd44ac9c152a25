"""``bench --app-overhead`` and ``bench --app-cost``: the chat app measured on the engine bench loads.

They are flags of ``bench`` because they take its load (the same engine, --concurrency,
--output-len), but what they measure is the app: ``overhead`` times the chat's streaming path
against reading the engine directly, ``cost`` the app's CPU per streamed token.  So the flags
and the dispatch live here, on the app's side, and the engine's load generator knows nothing of
the app: :func:`add_arguments` adds them to bench's parser and hands every run without them back
to bench's own command.  The measuring modules are imported only when asked for: bench must still
start on a GPU machine without the app environment.
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path
from typing import Callable

from server.errors import LoadTestError
from server.loadtest.lib.load_args import engine_config, results_folder


def add_arguments(bench: argparse.ArgumentParser) -> None:
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
                      help="also record a py-spy profile per app and number of chats (collapsed "
                           "stacks and the top functions)")
    cost.add_argument("--label", default="this checkout", help="a name for the app measured")
    bench.set_defaults(func=partial(cmd_app_modes, bench.get_default("func")))


def cmd_app_modes(engine_bench: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    if not (args.app_overhead or args.app_cost):
        return engine_bench(args)
    settings, cfg = engine_config(args)
    if cfg.open_loop:
        raise LoadTestError("--request-rate is the engine bench's: --app-overhead and --app-cost "
                            "measure the app at fixed numbers of chats (--concurrency).")
    out_dir = results_folder(args.out)
    if args.app_overhead:
        from server.loadtest.chat import overhead
        return overhead.run(cfg, settings, args.repetitions, out_dir)
    from server.loadtest.chat import cost
    from server.paths import ROOT
    variants = [cost.Variant(args.label, (args.app_root or ROOT).resolve(), cost.parse_env(args.app_env))]
    if args.baseline_root:
        variants.append(cost.Variant("baseline", args.baseline_root.resolve(),
                                     cost.parse_env(args.baseline_env)))
    return cost.run(cfg.url, cfg.concurrencies, cfg.load.output_len, args.repetitions,
                    variants, out_dir, args.profile, cfg.api_key)
