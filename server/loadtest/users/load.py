"""Run the user model against the app or the engine, with a live status line.

``qa-load --users N`` and every step of ``capacity`` come through here: the
chats are built for the chosen path (``chats.chat_factory``: the app's
websocket, or the engine's OpenAI API with the same prompts, system prompt and
reply length), the run shows one live line on stderr (users present, replies
and tokens per second, TTFT of the last seconds, errors), and the result is
``report``'s JSON. With ``processes`` > 1 the users are shared over that
many client processes (``processes``) and judged as one run.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from server.loadtest.lib.load_args import results_folder
from server.loadtest.users import processes as user_processes
from server.loadtest.users.chats import Target, chat_factory
from server.loadtest.users.model import UserModel, run_users
from server.loadtest.users.report import result_of
from server.loadtest.users.stats import live
from server.progress import StatusLine


async def run_user_load(target: Target, model: UserModel, prompts: list[str],
                        label: str = "users", processes: int = 1) -> dict:
    model.check()
    status = StatusLine(label, stream=sys.stderr, plain_every_s=5.0)
    if processes > 1:
        return await user_processes.run(target, model, prompts, processes, status)
    make_chat = await chat_factory(target, model.reply_timeout_s)
    run = await run_users(model, make_chat, prompts,
                          tick=lambda r: status.update(live(r.users, r.replies, r.now())))
    status.done(live(run.users, run.replies, run.wall_s))
    return result_of(run, target.url, target.through)


# --- qa-load --users ------------------------------------------------------------------

def add_user_arguments(parser) -> None:
    users = parser.add_argument_group(
        "users instead of one burst (--users): each arrives during the ramp, opens a chat and "
        "sends --turns messages, thinking between a reply and the next; writes summary.json, "
        "replies.csv, seconds.csv and timeline.png")
    users.add_argument("--users", type=int, help="simulated users (at most 1000)")
    users.add_argument("--turns", type=int, default=3,
                       help="messages per user (default 3; 0: until --duration-s)")
    users.add_argument("--think-s", type=float, default=5.0,
                       help="mean pause after a reply, drawn from 0.5-1.5x (default 5)")
    users.add_argument("--ramp-s", type=float, default=10.0,
                       help="the users arrive evenly over this long (default 10)")
    users.add_argument("--duration-s", type=float,
                       help="send window: no message after this many seconds (default: none)")
    users.add_argument("--reply-timeout-s", type=float, default=300.0,
                       help="a chat that does not open, or a reply not whole, within this long "
                            "is an error (default 300)")
    users.add_argument("--seed", type=int, default=0, help="for the think times (default 0)")
    users.add_argument("--out", type=Path, help="results folder (default benchmarks/results/<time>/)")
    users.add_argument("--no-plots", action="store_true", help="write JSON and CSV only")


def user_model(args, users: int) -> UserModel:
    return UserModel(users=users, turns=args.turns, think_s=args.think_s, ramp_s=args.ramp_s,
                     window_s=args.duration_s, reply_timeout_s=args.reply_timeout_s, seed=args.seed)


def cmd_users(args, url: str, prompts: list[str]) -> int:
    from server.loadtest.users import report as user_report
    result = asyncio.run(run_user_load(Target("app", url.rstrip("/")), user_model(args, args.users),
                                       prompts, "qa-load", args.processes))
    print(user_report.render(result))
    for path in user_report.save(result, results_folder(args.out),
                                 plots=not args.no_plots):
        print(f"wrote {path}")
    return 0 if result["summary"]["ok"] else 1
