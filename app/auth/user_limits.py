"""Fair shares: messages per minute and tokens per day for each user, across all app workers.

A user is the login name when login is on, else the client's address (one key per IPv4
address or IPv6 /64, as the login throttle counts them: ``app/auth/login_throttle.address_key``).

Each limit is a generic cell rate algorithm (GCRA): one number per user and limit, the
moment its allowance would be whole again if the user stopped now (``ready_at``).  Using
``cost`` units pushes it ``cost x period / amount`` seconds on; something fits while that
moment stays within one ``period`` of now.  So a user may spend the whole allowance at
once and it comes back evenly over the period: a sliding window without storing each
message.  Tokens are known only once a reply ends, so a message needs one token of room
to start and its tokens are spent after it; one reply can overshoot the day by its length.

The numbers live in the store the login throttle uses (``server/auth_store.py``: the
SQLite file every worker opens, or the PostgreSQL chat database), in a table of their
own, changed in one locked transaction per message: several workers count one user once.
Pure math here with the time passed in; ``UserLimits`` is the thin I/O around it.
``LocalRate`` counts the same way in one worker's memory, for what is cheap enough that a
shared store would cost more than it guards (the shared chats' pages per address).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

from app.auth.login_throttle import address_key
from server.auth_store import LIMIT_KEYS, AuthStore, KeyState

MINUTE_S, DAY_S = 60.0, 24 * 3600.0
MESSAGES, TOKENS = "messages", "tokens"


@dataclass(frozen=True)
class Rate:
    """``amount`` units per ``period_s``, all usable at once, coming back evenly."""

    amount: int
    period_s: float

    def wait_s(self, ready_at: float, now: float, cost: float = 1) -> float:
        """Seconds until ``cost`` more units fit; 0 when they fit now."""
        return max(0.0, self.spent(ready_at, now, cost) - self.period_s - now)

    def spent(self, ready_at: float, now: float, cost: float) -> float:
        """``ready_at`` once ``cost`` units are used."""
        return max(ready_at, now) + cost * self.period_s / self.amount


@dataclass(frozen=True)
class Limits:
    """The settings' limits; None where one is off."""

    messages: Optional[Rate]
    tokens: Optional[Rate]

    @classmethod
    def from_settings(cls, messages_per_min: int, tokens_per_day: int) -> "Limits":
        return cls(Rate(messages_per_min, MINUTE_S) if messages_per_min else None,
                   Rate(tokens_per_day, DAY_S) if tokens_per_day else None)

    @property
    def on(self) -> bool:
        return self.messages is not None or self.tokens is not None


@dataclass(frozen=True)
class Refusal:
    """A message over a limit: which one (MESSAGES or TOKENS), its amount, and when to retry."""

    limit: str
    amount: int
    retry_after_s: float


def user_key(login_name: Optional[str], address: str) -> str:
    return f"user:{login_name[:200]}" if login_name else address_key(address)


def _ready_at(states: dict[str, KeyState], key: str) -> float:
    state = states.get(key)
    return state.ready_at if state else 0.0


def _set(states: dict[str, KeyState], key: str, ready_at: float) -> None:
    # ``updated`` = ``ready_at``: past it the row says no more than a missing one, so rows
    # are forgotten exactly when they stop mattering.
    states[key] = KeyState(updated=ready_at, ready_at=ready_at)


def admit(states: dict[str, KeyState], limits: Limits, user: str, now: float) -> Optional[Refusal]:
    """Count a new message of ``user``, or refuse it (counting nothing) with the limit that
    holds it back longest."""
    checks = [(name, rate, f"{name}:{user}") for name, rate in ((MESSAGES, limits.messages),
                                                              (TOKENS, limits.tokens)) if rate]
    waits = [(rate.wait_s(_ready_at(states, key), now), name, rate) for name, rate, key in checks]
    longest = max(waits, default=None, key=lambda wait: wait[0])
    if longest is not None and longest[0] > 0:
        wait_s, name, rate = longest
        return Refusal(name, rate.amount, wait_s)
    if limits.messages:
        key = f"{MESSAGES}:{user}"
        _set(states, key, limits.messages.spent(_ready_at(states, key), now, 1))
    return None


def spend_tokens(states: dict[str, KeyState], rate: Rate, user: str, tokens: int, now: float) -> None:
    key = f"{TOKENS}:{user}"
    _set(states, key, rate.spent(_ready_at(states, key), now, tokens))


class LocalRate:
    """One ``Rate`` per key, in this process's memory: ``take`` counts one unit of ``key``, or
    says how many seconds until one fits (counting nothing).  Keys whose allowance is whole
    again are forgotten as the table grows, so it holds at most the keys seen in one period."""

    def __init__(self, rate: Rate, clock: Callable[[], float] = time.monotonic):
        self.rate, self.clock = rate, clock
        self.ready_at: dict[str, float] = {}
        self.sweep_at = 1024

    def take(self, key: str) -> float:
        now = self.clock()
        ready_at = self.ready_at.get(key, 0.0)
        wait_s = self.rate.wait_s(ready_at, now)
        if wait_s > 0:
            return wait_s
        self.ready_at[key] = self.rate.spent(ready_at, now, 1)
        if len(self.ready_at) >= self.sweep_at:
            self.ready_at = {k: at for k, at in self.ready_at.items() if at > now}
            self.sweep_at = max(1024, 2 * len(self.ready_at))
        return 0.0


class UserLimits:
    """``admit`` and ``spend_tokens`` on the shared store, on the wall clock (rows outlive us)."""

    def __init__(self, store: AuthStore, limits: Limits, clock: Callable[[], float] = time.time):
        self.store, self.limits, self.clock = store, limits, clock

    async def admit(self, user: str) -> Optional[Refusal]:
        now = self.clock()
        keys = [f"{name}:{user}" for name in (MESSAGES, TOKENS)]
        return await self.store.update_keys(keys, lambda states: admit(states, self.limits, user, now),
                                            now, LIMIT_KEYS)

    async def spend_tokens(self, user: str, tokens: int) -> None:
        if self.limits.tokens is None or tokens <= 0:
            return
        now, rate = self.clock(), self.limits.tokens
        await self.store.update_keys([f"{TOKENS}:{user}"],
                                     lambda states: spend_tokens(states, rate, user, tokens, now),
                                     now, LIMIT_KEYS)
