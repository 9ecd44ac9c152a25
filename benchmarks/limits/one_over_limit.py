"""What one user far over the per-user limit costs everyone else: TTFT p50 of the others.

    .venv/bin/python benchmarks/limits/one_over_limit.py --url http://127.0.0.1:8080 \
        --users 40 --turns 3 --think-s 5 --ramp-s 10 --tabs 8 [--out DIR]

Runs the same ``qa-load --users`` load (each user from an address of its own,
``--own-addresses``) twice against the running app: alone, then with one more user who
sends from ``--tabs`` chats at once, each message right after the previous one's answer
(and ``--retry-s`` after a refusal), for as long as the others chat.  It prints the
others' TTFT p50 and p99 both ways and what the heavy user got: with
ERNIE_USER_MESSAGES_PER_MIN set on the app, mostly ``limited`` answers; without it, the
engine's time.  Run it once against an app with the limit and once without to see what
the limit buys.  The load comes from this machine, whose X-Forwarded-For the app trusts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from server.loadtest.lib.chat_record import OUTCOMES  # noqa: E402
from server.loadtest.lib.chat_socket import DEFAULT_PROMPTS  # noqa: E402
from server.loadtest.users.chats import AppChat, Target  # noqa: E402
from server.loadtest.users.load import run_user_load  # noqa: E402
from server.loadtest.users.model import UserModel  # noqa: E402

HEAVY_ADDRESS = "10.78.0.1"  # apart from the users' 10.77.x.y


async def heavy_user(url: str, tabs: int, retry_s: float, stop: asyncio.Event) -> dict[str, int]:
    """One address asking from ``tabs`` chats without pause until ``stop``; its outcomes."""
    counts = dict.fromkeys(OUTCOMES, 0)

    async def tab(i: int) -> None:
        chat = AppChat(url, 10_000 + i, f"[heavy {i}]", address=HEAVY_ADDRESS)
        if await chat.open():
            return
        try:
            turn = 0
            while not stop.is_set():
                reply = await chat.ask(f"{DEFAULT_PROMPTS[turn % len(DEFAULT_PROMPTS)]} ({turn})")
                counts[reply.outcome or "lost"] += 1
                turn += 1
                if reply.outcome != "complete":
                    await asyncio.sleep(retry_s)
        finally:
            await chat.close()
    await asyncio.gather(*(tab(i) for i in range(tabs)))
    return counts


async def one_run(url: str, model: UserModel, tabs: int, retry_s: float) -> dict:
    target = Target("app", url, own_addresses=True)
    stop = asyncio.Event()
    heavy = asyncio.create_task(heavy_user(url, tabs, retry_s, stop)) if tabs else None
    try:
        result = await run_user_load(target, model, list(DEFAULT_PROMPTS), "users")
    finally:
        stop.set()
    result["heavy_user"] = await heavy if heavy else None
    return result


def line(name: str, result: dict) -> str:
    s = result["summary"]["all"]
    heavy = result["heavy_user"]
    got = ", ".join(f"{k} {n}" for k, n in heavy.items() if n) if heavy else "-"
    return (f"{name:<22} others' TTFT p50 {s['ttft_ms_p50'] or 0:7.0f} ms  p99 "
            f"{s['ttft_ms_p99'] or 0:7.0f} ms  ({s['replies']} replies)   heavy user: {got}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080", help="the chat app (or HAProxy)")
    parser.add_argument("--users", type=int, default=40)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--think-s", type=float, default=5.0)
    parser.add_argument("--ramp-s", type=float, default=10.0)
    parser.add_argument("--tabs", type=int, default=8, help="the heavy user's chats at once")
    parser.add_argument("--retry-s", type=float, default=0.5, help="its pause after a refusal")
    parser.add_argument("--out", type=Path, help="write both runs' results here as JSON")
    args = parser.parse_args()
    model = UserModel(users=args.users, turns=args.turns, think_s=args.think_s, ramp_s=args.ramp_s)
    runs = {}
    for name, tabs in (("alone", 0), ("with one heavy user", args.tabs)):
        runs[name] = asyncio.run(one_run(args.url.rstrip("/"), model, tabs, args.retry_s))
    for name, result in runs.items():
        print(line(name, result))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "one_over_limit.json").write_text(json.dumps(runs, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
