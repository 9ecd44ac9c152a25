"""One app worker's CPU under chat users: `qa-load --users` against one Chainlit worker.

    .venv/bin/python benchmarks/app-cost-cpu/users_cost.py --engine URL --users 150 \
        --baseline-root ../baseline-checkout --pairs 3 --out DIR [--profile]

`bench --app-cost` measures bursts of one message per chat; a crowd of users opens a chat,
sends a few messages with a reader's pause between them and leaves, so its CPU per token also
holds what each message and each chat costs. This starts one worker as `bench --app-cost` does
(no balancer, no saved chats) on ``--engine`` (a real vLLM, or the benchmarks' stand-in:
``python -m server.loadtest.chat.fast_upstream --port P --tokens-per-s 50 [--stream-interval 8]``),
runs one unmeasured crowd, then one measured crowd per run (``qa-load --users N --turns 3
--think-s 3 --ramp-s 10``, replies of ``--reply-tokens`` with ``ignore_eos``) and divides the
worker's CPU (utime + stime) by the tokens the users received.  With ``--baseline-root`` the
two checkouts run in alternating order (A B B A), each on a fresh worker; ``--app-env`` and
``--baseline-env`` set variables in either worker's environment (``ERNIE_STREAM_INTERVAL_MAX=1``
against a server that groups tokens itself); ``--profile`` records one more crowd of this
checkout under ``py-spy record --gil`` (collapsed stacks and the top functions).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from server.loadtest.chat.cost import (ProfiledApp, Variant, add_variant_arguments, py_spy,  # noqa: E402
                                       render_top, spread, top_frames, variants_from)
from server.loadtest.lib.cpu import process_cpu_s  # noqa: E402


def crowd(url: str, users: int, out: Path) -> int:
    """One crowd through the worker at ``url``; the reply tokens its users received."""
    done = subprocess.run([sys.executable, "-m", "server.cli", "qa-load", "--url", url, "--users", str(users),
                           "--turns", "3", "--think-s", "3", "--ramp-s", "10", "--timeout-s", "300",
                           "--no-plots", "--out", str(out)], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"qa-load failed ({done.returncode}): {done.stdout[-800:]}{done.stderr[-800:]}")
    return json.loads((out / "summary.json").read_text())["cpu"]["tokens"]


def one_run(engine: str, variant: Variant, users: int, reply_tokens: int, out: Path,
            profile: Path | None = None) -> dict:
    with ProfiledApp(engine, reply_tokens, variant.root, variant.env, out) as app:
        crowd(app.url, users, out / "warm-up")  # the worker's connections and first-use costs
        before = process_cpu_s(app.pid)
        with py_spy(app.pid, profile, "raw", gil=True) if profile else nullcontext():
            tokens = crowd(app.url, users, out / "measured")
        cpu = process_cpu_s(app.pid) - before
    return {"label": variant.label, "cpu_s": cpu, "tokens": tokens,
            "cpu_s_per_1k_tokens": 1000 * cpu / tokens}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", default="http://127.0.0.1:8000")
    parser.add_argument("--users", type=int, default=150)
    parser.add_argument("--reply-tokens", type=int, default=256)
    add_variant_arguments(parser)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    order = variants_from(args, ROOT)
    runs = []
    for i, variant in enumerate(order):
        run = one_run(args.engine, variant, args.users, args.reply_tokens, args.out / f"run-{i + 1}")
        runs.append(run)
        print(f"run {i + 1}/{len(order)} {variant.label}: {run['cpu_s']:.2f} CPU-s, "
              f"{run['cpu_s_per_1k_tokens']:.4f} per 1,000 tokens", flush=True)
    summary = {label: spread([r["cpu_s_per_1k_tokens"] for r in runs if r["label"] == label])
               for label in dict.fromkeys(r["label"] for r in runs)}
    for label, s in summary.items():
        print(f"{label}: {s['mean']:.4f} CPU-s per 1,000 tokens (min {s['min']:.4f}, max {s['max']:.4f}, "
              f"{s['n']} runs)")
    if "baseline" in summary:
        pairs = zip([r for r in runs if r["label"] == "this"], [r for r in runs if r["label"] == "baseline"])
        summary["ratio"] = spread([a["cpu_s_per_1k_tokens"] / b["cpu_s_per_1k_tokens"] for a, b in pairs])
        this, base = summary["this"], summary["baseline"]
        overlap = this["max"] >= base["min"] and base["max"] >= this["min"]
        print(f"this / baseline, paired: {summary['ratio']['mean']:.3f} (min {summary['ratio']['min']:.3f}, "
              f"max {summary['ratio']['max']:.3f})" + ("; the ranges overlap: noise" if overlap
                                                       else "; the ranges do not overlap"))
    if args.profile:
        stacks = args.out / "profile-raw.txt"
        one_run(args.engine, order[0], args.users, args.reply_tokens, args.out / "profiled", stacks)
        (args.out / "profile-top.txt").write_text(render_top(top_frames(stacks.read_text())) + "\n")
        print(f"profile: {stacks}")
    (args.out / "users-cost.json").write_text(json.dumps(
        {"users": args.users, "reply_tokens": args.reply_tokens, "summary": summary, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
