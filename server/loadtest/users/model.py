"""Users, not bursts: chats that arrive over a ramp and talk for turns, thinking in between.

A burst (``qa-load --sessions N``) asks N questions at the same instant; a crowd
does not.  Here each simulated user arrives at its moment of the ramp
(``ramp_s / users`` apart), or, with an arrival rate (``qa-load --arrival-rate``), as a
Poisson process seeded by ``seed`` (``lib.arrivals``: exponential gaps, rescaled so that
the last user arrives at ``users / rate``, which is then the ramp), opens a chat, and then, turn after turn, sends a
message, reads the whole reply and thinks (uniformly 0.5-1.5 x ``think_s``)
before the next one, in the same chat, so the history grows as a person's does.
A user leaves after ``turns`` messages, or when the send window
(``window_s``) has closed: no message is sent after it, and the replies in
flight are waited for, so the next run starts from an idle server and every
reply that was asked for is accounted for.  Every wait is bounded: a chat
that does not open, or a reply that does not end, within ``reply_timeout_s``
is an error of that user, who then leaves.

The same user model runs through the app (``AppChat``: the websocket, as a
browser) or straight to the engine (``EngineChat``: its OpenAI API), which is
how ``capacity`` compares the two.
"""

from __future__ import annotations

import asyncio
import math
import random
import secrets
import time
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Awaitable, Callable, Optional

from server.errors import LoadTestError
from server.loadtest.lib.arrivals import arrival_times
from server.loadtest.users.chats import Chat, Reply

# A typo (100000) must not open tens of thousands of sockets from a tester's machine. One
# H200 serves more than 1,000 chat users through the app (docs/performance.md, "Chat users
# within the objective"): capacity must be
# able to look past that; 4,000 users cost the load client about two cores (8.6 CPU-s over
# 17 s for 1,000 chats on the H200 host).
MAX_USERS = 4000


class UsersError(LoadTestError):
    """A user model that cannot run (bad numbers); the message says which and why."""


@dataclass(frozen=True)
class UserModel:
    users: int
    turns: int = 3              # messages per user; 0: until the send window closes
    think_s: float = 5.0        # mean pause between a reply and the next message
    ramp_s: float = 10.0        # the users arrive evenly over this long
    window_s: Optional[float] = None  # no message is sent after this many seconds
    reply_timeout_s: float = 300.0  # for opening the chat, and for each whole reply
    seed: int = 0
    arrival_rate: Optional[float] = None  # users per second, Poisson; ramp_s is then users / rate

    def check(self) -> None:
        if not 1 <= self.users <= MAX_USERS:
            raise UsersError(f"--users must be between 1 and {MAX_USERS} (got {self.users}).")
        if self.turns < 0 or self.think_s < 0 or self.ramp_s < 0 or self.reply_timeout_s <= 0:
            raise UsersError("--turns, --think-s and --ramp-s must not be negative, and the "
                             "reply timeout must be positive.")
        if self.arrival_rate is not None and not 0 < self.arrival_rate < math.inf:
            raise UsersError(f"--arrival-rate must be a positive number of users per second "
                             f"(got {self.arrival_rate:g}).")
        if self.turns == 0 and self.window_s is None:
            raise UsersError("Users without a number of turns need a send window (--duration-s).")
        if self.window_s is not None and self.window_s <= self.ramp_s:
            raise UsersError(f"--duration-s ({self.window_s:g}) must be longer than --ramp-s "
                             f"({self.ramp_s:g}): the users would still be arriving.")

    def arrival_s(self, user: int) -> float:
        if self.arrival_rate is not None:
            return self.poisson_arrivals[user]
        return self.ramp_s * user / self.users

    @cached_property
    def poisson_arrivals(self) -> list[float]:
        """Every user's arrival second with ``arrival_rate`` (the same in every client process:
        drawn from the seed)."""
        return arrival_times(self.users, self.arrival_rate, 1.0,
                             random.Random(f"arrivals {self.seed}"))

    def think(self, rng: random.Random) -> float:
        return self.think_s * rng.uniform(0.5, 1.5)


@dataclass
class ReplyRecord:
    """One turn of one user; ``sent_s`` from the start of the run, the rest from sending."""

    user: int
    turn: int
    sent_s: float
    ttft_s: Optional[float] = None
    total_s: Optional[float] = None
    tokens: Optional[int] = None
    complete: bool = False
    error: str = ""
    outcome: str = ""  # chat_record.OUTCOMES

    @property
    def first_token_at(self) -> Optional[float]:
        return None if self.ttft_s is None else self.sent_s + self.ttft_s

    @property
    def done_at(self) -> Optional[float]:
        return None if self.total_s is None else self.sent_s + self.total_s

    @property
    def decode_tokens_per_s(self) -> Optional[float]:
        """What the user saw stream: tokens after the first over the time after the first."""
        if self.tokens is None or self.tokens < 2 or self.ttft_s is None or self.total_s is None:
            return None
        span = self.total_s - self.ttft_s
        return (self.tokens - 1) / span if span > 0 else None

    def as_dict(self) -> dict:
        return {**asdict(self), "decode_tokens_per_s": self.decode_tokens_per_s}


@dataclass
class UserRecord:
    """When a user came and left (seconds from the start of the run), and why it failed."""

    user: int
    arrived_s: float
    opened_s: Optional[float] = None
    left_s: Optional[float] = None
    error: str = ""


@dataclass
class UsersRun:
    model: UserModel
    users: list[UserRecord] = field(default_factory=list)
    replies: list[ReplyRecord] = field(default_factory=list)
    chats: list[Chat] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    wall_s: float = 0.0

    def now(self) -> float:
        return time.perf_counter() - self.started


def user_tag(run: str, user: int) -> str:
    """The tag that starts each of a user's messages (chat_record.TAG recognises it)."""
    return f"[qa {run} s{user:03d}]"


def prompt_for(tag: str, prompts: list[str], user: int, turn: int) -> str:
    return f"{tag} {prompts[(user + turn) % len(prompts)]}"


async def one_user(run: UsersRun, chat: Chat, user: UserRecord, prompts: list[str], tag: str,
                   rng: random.Random) -> None:
    model = run.model
    await asyncio.sleep(max(0.0, user.arrived_s - run.now()))
    limit = model.reply_timeout_s
    try:
        user.error = await asyncio.wait_for(chat.open(), limit)
    except asyncio.TimeoutError:
        user.error = f"the chat did not open within {limit:g} s"
    user.opened_s = run.now()
    turn = 0
    while not user.error and (model.turns == 0 or turn < model.turns):
        if model.window_s is not None and run.now() >= model.window_s:
            break
        record = ReplyRecord(user.user, turn, run.now())
        run.replies.append(record)
        try:
            reply: Reply = await asyncio.wait_for(chat.ask(prompt_for(tag, prompts, user.user, turn)),
                                                  limit)
        except asyncio.TimeoutError:
            reply = Reply(error=f"no whole reply within {limit:g} s", outcome="lost")
        record.ttft_s, record.total_s, record.tokens = reply.ttft_s, reply.total_s, reply.tokens
        record.complete, record.error, record.outcome = reply.complete, reply.error, reply.outcome
        if reply.error:
            break  # a late reply, or a closed chat, would spoil every later turn of this chat
        turn += 1
        await asyncio.sleep(model.think(rng))
    user.left_s = run.now()


async def run_users(model: UserModel, make_chat: Callable[[int, str], Chat], prompts: list[str],
                    tick: Optional[Callable[[UsersRun], Awaitable[None] | None]] = None,
                    share: Optional[tuple[int, int]] = None,
                    on_start: Callable[[float], None] = lambda started: None) -> UsersRun:
    """Run the user model to its end; ``tick(run)`` is called about once a second meanwhile.
    ``share`` (i, k): only the users whose number is i modulo k, as client process i of k
    runs them (``users.processes``), each arriving and thinking as in one process.
    ``on_start(started)``: the users' clock starts at perf_counter time ``started``."""
    model.check()
    if not prompts:
        raise UsersError("There must be at least one prompt.")
    run = UsersRun(model)
    on_start(run.started)
    code = secrets.token_hex(3)  # two runs at once never share a tag
    rng = random.Random(model.seed)
    seeds = [rng.random() for _ in range(model.users)]  # each user's, whichever process runs it
    mine, of = share or (0, 1)
    tasks = []
    for i in range(mine, model.users, of):
        tag = user_tag(code, i)
        chat = make_chat(i, tag)
        run.chats.append(chat)
        run.users.append(UserRecord(i, model.arrival_s(i)))
        tasks.append(asyncio.create_task(
            one_user(run, chat, run.users[-1], prompts, tag, random.Random(seeds[i]))))

    async def ticker() -> None:
        while True:
            await asyncio.sleep(1.0)
            if tick is not None and (pending := tick(run)) is not None:
                await pending

    ticking = asyncio.create_task(ticker())
    try:
        await asyncio.gather(*tasks)  # every wait in one_user is bounded
    finally:
        for task in tasks:
            task.cancel()
        ticking.cancel()
        await asyncio.gather(ticking, *tasks, *(chat.close() for chat in run.chats),
                             return_exceptions=True)
        run.wall_s = run.now()
    return run
