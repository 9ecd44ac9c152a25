"""The app's CPU per message in a burst: one Chainlit worker, N chats that all send at once.

    .venv/bin/python benchmarks/app-cost-cpu/per_message_burst.py --engine http://127.0.0.1:8000 \
        --chats 128 --turns 6 --baseline-root ../baseline-checkout --pairs 3 --out DIR [--profile]

A crowd's burst queues every message on its worker's one event loop before its request
reaches vLLM (docs/performance.md, "Bursts: chats that send at the same instant"), so what a message costs the worker
is what the later chats of a burst wait.  `bench --app-cost` counts the CPU per streamed
token, opening the chats included; this counts the CPU per message alone: the chats are
opened first (not measured), then every turn sends one message in each chat at once and
reads the app process's CPU (utime + stime) over it.  Replies are 4 tokens (the server's
``ignore_eos``), so the reading is nearly all per-message work: the handler, the request to
the engine, Chainlit's steps and emits.  The first turn opens the worker's connections to
the engine and is left out of the mean.

With ``--baseline-root`` the two checkouts run in alternating order (A B B A, this one first), each time on
a fresh worker, and the ratio of paired means is printed; ``--app-env`` and ``--baseline-env``
set a variable in either worker's environment (alone, ``--baseline-env`` compares this
checkout with itself); ``--think-s`` pauses between turns, as a reader does; ``--profile``
records a py-spy profile (collapsed stacks, ``--format raw``) of one more run of this checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from server.loadtest.chat.cost import (ProfiledApp, Variant, add_variant_arguments,  # noqa: E402
                                       py_spy, spread, variants_from)
from server.loadtest.lib.cpu import process_cpu_s  # noqa: E402
from server.loadtest.chat.qa_load import make_records  # noqa: E402
from server.loadtest.lib.chat_socket import ChatSession  # noqa: E402

PROMPTS = ["Say hello.", "Tell me a story.", "What is a GPU?", "Count to three."]
REPLY_TOKENS = 4


async def turns(url: str, chats: int, count: int, pid: int, think_s: float = 0.0) -> list[dict]:
    """Open ``chats`` chats, then ``count`` turns of one message each, all at once, ``think_s``
    apart (not measured)."""
    sessions = [ChatSession(record) for record in make_records(PROMPTS, chats)]
    await asyncio.gather(*(s.open(url) for s in sessions))
    out = []
    try:
        for turn in range(count):
            before, started = process_cpu_s(pid), time.perf_counter()
            await asyncio.gather(*(s.ask() for s in sessions))
            cpu = process_cpu_s(pid) - before
            ttft = sorted(1000 * s.record.ttft_s for s in sessions if s.record.ttft_s is not None)
            out.append({"turn": turn, "cpu_ms_per_message": 1000 * cpu / chats,
                        "wall_s": time.perf_counter() - started, "replied": len(ttft),
                        "ttft_p50_ms": statistics.median(ttft) if ttft else None})
            for s in sessions:
                s.next_turn(PROMPTS[(turn + 1) % len(PROMPTS)])
            await asyncio.sleep(think_s)
    finally:
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)
    return out


def one_run(engine: str, variant: Variant, chats: int, count: int, out_dir: Path, think_s: float,
            profile: Path | None = None) -> list[dict]:
    with ProfiledApp(engine, REPLY_TOKENS, variant.root, variant.env, out_dir) as app:
        with py_spy(app.pid, profile, "raw", 250) if profile else nullcontext():
            return asyncio.run(turns(app.url, chats, count, app.pid, think_s))


def mean_after_first(run: list[dict]) -> float:
    return statistics.fmean(t["cpu_ms_per_message"] for t in run[1:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", default="http://127.0.0.1:8000")
    parser.add_argument("--chats", type=int, default=128)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--think-s", type=float, default=0.0,
                        help="pause between turns, not measured (a reader's pause: does the "
                             "connection to the engine outlast it?)")
    add_variant_arguments(parser)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if args.turns < 2:
        parser.error("--turns must be 2 or more: the first turn is left out of the mean")
    args.out.mkdir(parents=True, exist_ok=True)
    order = variants_from(args, ROOT)
    results: dict[str, list[float]] = {}
    runs = []
    for i, variant in enumerate(order):
        run = one_run(args.engine, variant, args.chats, args.turns, args.out, args.think_s)
        mean = mean_after_first(run)
        results.setdefault(variant.label, []).append(mean)
        runs.append({"label": variant.label, "root": str(variant.root), "turns": run})
        each = ", ".join(f"{t['cpu_ms_per_message']:.2f}" for t in run)
        print(f"run {i + 1}/{len(order)} {variant.label}: {mean:.2f} ms of CPU per message "
              f"(turns: {each})", flush=True)
    summary = {label: spread(v) for label, v in results.items()}
    for label, s in summary.items():
        print(f"{label}: {s['mean']:.2f} ms per message (min {s['min']:.2f}, max {s['max']:.2f}, {s['n']} runs)")
    if "baseline" in results:
        ratios = [a / b for a, b in zip(results["this"], results["baseline"])]
        summary["ratio"] = spread(ratios)
        overlap = summary["this"]["max"] >= summary["baseline"]["min"] and \
            summary["baseline"]["max"] >= summary["this"]["min"]
        print(f"this / baseline, paired: {summary['ratio']['mean']:.2f} "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f})"
              + ("; the ranges overlap: noise" if overlap else "; the ranges do not overlap"))
    if args.profile:
        one_run(args.engine, order[0], args.chats, args.turns, args.out, args.think_s,
                args.out / "profile-raw.txt")
        print(f"profile: {args.out / 'profile-raw.txt'}")
    (args.out / "per-message.json").write_text(json.dumps(
        {"chats": args.chats, "turns": args.turns, "think_s": args.think_s, "reply_tokens": REPLY_TOKENS,
         "summary": summary, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
