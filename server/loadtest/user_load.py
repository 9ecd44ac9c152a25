"""Run the user model against the app or the engine, with a live status line.

``qa-load --users N`` and every step of ``capacity`` come through here: the
chats are built for the chosen path (the app's websocket, or the engine's
OpenAI API with the same prompts, system prompt and reply length), the run
shows one live line on stderr (users present, replies and tokens per second,
TTFT of the last seconds, errors), and the result is ``user_report``'s JSON.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import httpx

from server.loadtest.config import BenchConfig
from server.loadtest.chat_socket import check_app
from server.loadtest.target import served_model
from server.loadtest.user_chats import AppChat, Chat, EngineChat
from server.loadtest.user_report import result_of
from server.loadtest.user_stats import live
from server.loadtest.users import UserModel, UsersError, run_users
from server.paths import RESULTS_DIR
from server.progress import StatusLine

PATHS = ("app", "engine")


@dataclass(frozen=True)
class Target:
    """Where the users go, and what a direct chat sends (the app decides that itself)."""

    through: str                 # "app" or "engine"
    url: str
    api_key: Optional[str] = None
    system_prompt: str = ""
    max_tokens: int = 512
    ignore_eos: bool = False
    temperature: Optional[float] = None  # None: the engine's default
    top_p: Optional[float] = None

    def sampling(self) -> dict:
        """What a direct chat sends besides the messages, as the app would."""
        body = {"max_tokens": self.max_tokens, "temperature": self.temperature, "top_p": self.top_p}
        body = {k: v for k, v in body.items() if v is not None}
        return {**body, "ignore_eos": True} if self.ignore_eos else body


async def chat_factory(target: Target, reply_timeout_s: float) -> Callable[[int, str], Chat]:
    """Check the target answers, then return a function that builds one user's chat."""
    if target.through == "app":
        await check_app(target.url)
        return lambda index, tag: AppChat(target.url, index, tag)
    if target.through != "engine":
        raise UsersError(f"--through must be one of {', '.join(PATHS)} (got {target.through!r}).")
    cfg = BenchConfig(url=target.url, api_key=target.api_key)
    async with httpx.AsyncClient(timeout=10.0) as http:
        model, _ = await served_model(http, cfg)
    return lambda index, tag: EngineChat(target.url, target.api_key, model, target.system_prompt,
                                         target.sampling(), reply_timeout_s)


async def run_user_load(target: Target, model: UserModel, prompts: list[str],
                        label: str = "users") -> dict:
    model.check()
    make_chat = await chat_factory(target, model.reply_timeout_s)
    status = StatusLine(label, stream=sys.stderr, plain_every_s=5.0)
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
    from server.loadtest import user_report
    result = asyncio.run(run_user_load(Target("app", url.rstrip("/")), user_model(args, args.users),
                                       prompts, "qa-load"))
    print(user_report.render(result))
    for path in user_report.save(result, args.out or RESULTS_DIR / time.strftime("%Y%m%d-%H%M%S"),
                                 plots=not args.no_plots):
        print(f"wrote {path}")
    return 0 if result["summary"]["ok"] else 1
