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

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Sequence
from urllib.parse import urlsplit

from server.loadtest.lib import cpu
from server.loadtest.lib.kills import Kill, KillError, find, parse_kill, run_kills
from server.loadtest.lib.load_args import results_folder
from server.loadtest.users import processes as user_processes
from server.loadtest.users.chats import Target, chat_factory
from server.loadtest.users.model import UserModel, UsersError, run_users
from server.loadtest.users.report import result_of
from server.loadtest.users.stats import live
from server.progress import StatusLine


async def run_user_load(target: Target, model: UserModel, prompts: list[str],
                        label: str = "users", processes: int = 1, kills: Sequence[Kill] = ()) -> dict:
    """The run's result; ``kills`` (qa-load --kill) are carried out at their seconds meanwhile."""
    model.check()
    status = StatusLine(label, stream=sys.stderr, plain_every_s=5.0)
    port = urlsplit(target.url).port or 80
    for kill in kills:
        find(kill, port)  # a part that cannot be found stops the run before it starts
    users_started: asyncio.Future[float] = asyncio.get_running_loop().create_future()
    killing = asyncio.create_task(run_kills(
        list(kills), port, users_started,
        lambda line: print(f"[{label}] {line}", file=sys.stderr, flush=True)))
    try:
        if processes > 1:
            result = await user_processes.run(target, model, prompts, processes, status,
                                              on_start=users_started.set_result)
        else:
            make_chat = await chat_factory(target, model.reply_timeout_s)
            run = await run_users(model, make_chat, prompts,
                                  tick=lambda r: status.update(live(r.users, r.replies, r.now())),
                                  on_start=users_started.set_result)
            status.done(live(run.users, run.replies, run.wall_s))
            result = result_of(run, target.url, target.through)
    finally:
        killing.cancel()
    if kills:
        result["kills"] = await killing if killing.done() and not killing.cancelled() else []
    return result


async def sampled_user_load(target: Target, model: UserModel, prompts: list[str], label: str = "users",
                            processes: int = 1, kills: Sequence[Kill] = ()) -> dict:
    """:func:`run_user_load`, with the machine's CPU by kind of process over the run (``cpu``)."""
    with cpu.sampled() as figures:
        result = await run_user_load(target, model, prompts, label, processes, kills)
    result["cpu"] = cpu.with_tokens(figures, sum(r["tokens"] or 0 for r in result["replies"]))
    return result


# --- qa-load --users ------------------------------------------------------------------

def add_user_arguments(parser) -> None:
    users = parser.add_argument_group(
        "users instead of one burst (--users): each arrives during the ramp, opens a chat and "
        "sends --turns messages, thinking between a reply and the next; writes summary.json, "
        "replies.csv, seconds.csv, timeline.png and report.html")
    users.add_argument("--users", type=int, help="simulated users (at most 1000)")
    users.add_argument("--turns", type=int, default=3,
                       help="messages per user (default 3; 0: until --duration-s)")
    users.add_argument("--think-s", type=float, default=5.0,
                       help="mean pause after a reply, drawn from 0.5-1.5x (default 5)")
    users.add_argument("--ramp-s", type=float, default=10.0,
                       help="the users arrive evenly over this long (default 10)")
    users.add_argument("--arrival-rate", type=float, metavar="R",
                       help="the users arrive as a Poisson process of R users per second "
                            "(seeded by --seed) instead of evenly over --ramp-s; the last arrives "
                            "at USERS/R s, which is then the ramp (the steady state starts there)")
    users.add_argument("--duration-s", type=float,
                       help="send window: no message after this many seconds (default: none)")
    users.add_argument("--reply-timeout-s", type=float, default=300.0,
                       help="a chat that does not open, or a reply not whole, within this long "
                            "is an error (default 300)")
    users.add_argument("--seed", type=int, default=0, help="for the think times (default 0)")
    users.add_argument("--own-addresses", action="store_true",
                       help="each user from an address of its own (X-Forwarded-For, trusted from "
                            "this machine only): per-user limits without login then count each apart")
    users.add_argument("--kill", type=kill_argument, action="append", default=[], metavar="PART@SECOND",
                       help="kill a part of the running stack at that second of the run, as a crash "
                            "would (repeatable): worker:N (app worker N), engine:N (copy N's engine "
                            "core), balancer (HAProxy); e.g. --kill worker:1@15")
    users.add_argument("--out", type=Path, help="results folder (default benchmarks/results/<time>/)")
    users.add_argument("--no-plots", action="store_true", help="write JSON and CSV only")


def kill_argument(text: str) -> Kill:
    try:
        return parse_kill(text)
    except KillError as exc:  # argparse shows this one's own message
        raise argparse.ArgumentTypeError(str(exc)) from None


def user_model(args, users: int) -> UserModel:
    rate = getattr(args, "arrival_rate", None)
    if rate is not None and not rate > 0:
        raise UsersError(f"--arrival-rate must be a positive number of users per second (got {rate:g}).")
    ramp_s = users / rate if rate is not None else args.ramp_s
    return UserModel(users=users, turns=args.turns, think_s=args.think_s, ramp_s=ramp_s,
                     window_s=args.duration_s, reply_timeout_s=args.reply_timeout_s, seed=args.seed,
                     arrival_rate=rate)


def cmd_users(args, url: str, prompts: list[str], cookie: str = "", chat_profile: str = "") -> int:
    from server.loadtest.users import report as user_report
    target = Target("app", url.rstrip("/"), cookie=cookie, own_addresses=args.own_addresses,
                    chat_profile=chat_profile)
    result = asyncio.run(sampled_user_load(target, user_model(args, args.users),
                                       prompts, "qa-load", args.processes, args.kill))
    print(user_report.render(result))
    for path in user_report.save(result, results_folder(args.out),
                                 plots=not args.no_plots):
        print(f"wrote {path}")
    return 0 if result["summary"]["ok"] else 1
