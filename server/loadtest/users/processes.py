"""Users from several client processes: ``qa-load --users N --processes K`` and
``capacity --processes K``.

A thousand users' sockets in one asyncio process make the client part of what it measures:
on the H200 one process opening 1,000 chats saw a TTFT p50 of 778-940 ms, four processes of
250 saw 433-533 ms on the same stack (``8e59b31:benchmarks/gpu/h200/session-1202e/``). So
``capacity``'s
ceilings from one process are lower bounds. Here client process i of K (``python -m
server.loadtest.users.processes``) runs the users whose number is i modulo K. Each user
arrives at its moment of the ramp and thinks with its own seed, as in one process. Each
client checks the target, says it is ready, and starts its clock on one "go" with the others.
Every user, reply and chat comes back to be judged as one run (``user_report.result_from``):
a message that reached chats of two processes still counts as crossed.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from typing import Callable

from server.loadtest.lib.chat_record import SessionRecord
from server.loadtest.lib.client_processes import MAX_PROCESSES, ClientProcesses, child_main, parent_line
from server.loadtest.users.chats import Target, chat_factory
from server.loadtest.users.model import ReplyRecord, UserModel, UserRecord, UsersError, run_users
from server.loadtest.users.report import result_from
from server.loadtest.users.stats import live_counts, live_line
from server.paths import ROOT
from server.progress import StatusLine

READY = "users: ready"
PROGRESS = "users: now "


def check_processes(processes: int, users: int) -> None:
    if not 1 <= processes <= MAX_PROCESSES:
        raise UsersError(f"--processes must be between 1 and {MAX_PROCESSES} (got {processes}).")
    if processes > users:
        raise UsersError(f"--processes {processes} is more than the {users} users: each client "
                         "process needs at least one.")


def added(counts: list[dict]) -> dict:
    """The client processes' live counts as one: sums, over the longest window."""
    total = {key: sum(c[key] for c in counts) for key in ("present", "users", "waiting", "done",
                                                           "tokens", "errors")}
    return {**total, "span_s": max(c["span_s"] for c in counts)}


async def run(target: Target, model: UserModel, prompts: list[str], processes: int,
              status: StatusLine, on_start: Callable[[float], None] = lambda started: None) -> dict:
    """The users of ``model`` over ``processes`` client processes, judged as one run;
    ``on_start(started)``: the clients' clocks start at about perf_counter time ``started``."""
    check_processes(processes, model.users)
    latest: list[dict] = [{}] * processes

    def progress(i: int, line: str) -> bool:
        if line.startswith(PROGRESS):
            latest[i] = json.loads(line[len(PROGRESS):])
            return True
        return False

    def line(counts: dict) -> str:
        return f"{live_line(counts)}  errors {counts['errors']}  ({processes} client processes)"

    def show() -> None:
        if all(latest):
            status.update(line(added(latest)))

    command = [sys.executable, "-m", "server.loadtest.users.processes"]
    async with ClientProcesses([command] * processes, ROOT, READY, UsersError,
                               "users client process", progress) as group:
        await group.tell([json.dumps({"target": asdict(target), "model": asdict(model),
                                      "prompts": prompts, "share": [i, processes]})
                          for i in range(processes)])
        await group.wait_ready(lambda n: status.update(f"{n} of {processes} client processes ready"))
        await group.tell(["go"] * processes)
        on_start(time.perf_counter())
        parts = [json.loads(text) for text in await group.results(show)]
    users = sorted((UserRecord(**u) for part in parts for u in part["users"]), key=lambda u: u.user)
    replies = sorted((ReplyRecord(**{k: v for k, v in r.items() if k != "decode_tokens_per_s"})
                      for part in parts for r in part["replies"]), key=lambda r: r.sent_s)
    sessions = [SessionRecord.from_dict(s) for part in parts for s in part["sessions"]]
    wall_s = max(part["wall_s"] for part in parts)
    status.done(line(live_counts(users, replies, wall_s)))
    return {**result_from(model, users, replies, sessions, wall_s, target.url, target.through),
            "processes": processes}


# --- a client process -------------------------------------------------------------------

async def client() -> dict:
    """Read the task, check the target, say ready, wait for "go", run this share of users."""
    task = json.loads(await parent_line())
    target, model = Target(**task["target"]), UserModel(**task["model"])
    make_chat = await chat_factory(target, model.reply_timeout_s)
    print(READY, file=sys.stderr, flush=True)
    await parent_line()  # "go"

    def tell(r) -> None:
        print(PROGRESS + json.dumps(live_counts(r.users, r.replies, r.now())), file=sys.stderr, flush=True)

    run = await run_users(model, make_chat, task["prompts"], tick=tell, share=tuple(task["share"]))
    sessions = [chat.session.record.as_dict() for chat in run.chats if chat.session is not None]
    return {"users": [vars(u) for u in run.users], "replies": [r.as_dict() for r in run.replies],
            "sessions": sessions, "wall_s": run.wall_s}


if __name__ == "__main__":
    sys.exit(child_main(client, "users client"))
