"""Fair shares: messages per minute and tokens per day for each user, across all app workers;
and replies at once for each user, in this worker.

A user is the login name when login is on, else the client's address (one key per IPv4
address or IPv6 /64, as the login throttle counts them: ``app/auth/login_throttle.address_key``).

Each limit is a generic cell rate algorithm (GCRA): one number per user and limit, the
moment its allowance would be whole again if the user stopped now (``ready_at``).  Using
``cost`` units pushes it ``cost x period / amount`` seconds on; something fits while that
moment stays within one ``period`` of now.  So a user may spend the whole allowance at
once and it comes back evenly over the period: a sliding window without storing each
message.

A reply's tokens are known only once it ends, so admitting a message reserves what it may
spend (:func:`reservation`: its prompt's estimate plus the reply's most tokens, never more
than the day, so a small day still admits one message), and the reply then settles the
reservation against what it really spent: the rest given back, more taken (:class:`Held`).
Ten messages sent at once thus cannot all start on the room of one.  A command (``/status``
...) is counted as a message and reserves nothing.

The numbers live in the store the login throttle uses (``server/auth_store.py``: the
SQLite file every worker opens, or the PostgreSQL chat database), in a table of their
own, changed in one locked transaction per message: several workers count one user once.
Replies at once (:class:`RepliesAtOnce`) are counted in the worker itself: a reply lives in
one worker, and a count in the shared store would outlive a worker killed mid-reply.
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


def reservation(prompt_tokens: int, reply_tokens: int, window: int, day: Optional[Rate],
                replies: int = 1) -> int:
    """The tokens a message reserves from its user's day: ``replies`` replies (``/compare``: one
    per model) of a prompt of about ``prompt_tokens`` and at most ``reply_tokens``, each within
    the model's ``window``; never more than the day's amount, so a small day still admits one
    message.  0 without a day's limit."""
    if day is None:
        return 0
    one = min(max(0, prompt_tokens) + max(0, reply_tokens), window)
    return max(1, min(one * max(1, replies), day.amount))


def admit(states: dict[str, KeyState], limits: Limits, user: str, now: float,
          tokens: int = 0) -> Optional[Refusal]:
    """Count a new message of ``user`` and reserve ``tokens`` of its day (0: a command, which
    needs no room), or refuse it (counting and reserving nothing) with the limit that holds it
    back longest."""
    checks = [(name, rate, f"{name}:{user}", cost) for name, rate, cost in (
        (MESSAGES, limits.messages, 1), (TOKENS, limits.tokens, tokens)) if rate and cost > 0]
    waits = [(rate.wait_s(_ready_at(states, key), now, cost), name, rate) for name, rate, key, cost in checks]
    longest = max(waits, default=None, key=lambda wait: wait[0])
    if longest is not None and longest[0] > 0:
        wait_s, name, rate = longest
        return Refusal(name, rate.amount, wait_s)
    for _, rate, key, cost in checks:
        _set(states, key, rate.spent(_ready_at(states, key), now, cost))
    return None


def spend_tokens(states: dict[str, KeyState], rate: Rate, user: str, tokens: int, now: float) -> None:
    """``tokens`` more on the user's day; a negative number gives that many back (a reservation
    not spent).  Given back, the day never holds more than its whole amount: a moment past is
    as good as now."""
    key = f"{TOKENS}:{user}"
    ready_at = _ready_at(states, key)
    if tokens >= 0:
        _set(states, key, rate.spent(ready_at, now, tokens))
    else:
        _set(states, key, ready_at + tokens * rate.period_s / rate.amount)


@dataclass
class Held:
    """The tokens one admitted message reserved and its replies have not yet spent."""

    tokens: int = 0

    def cover(self, spent: int) -> int:
        """A reply spent ``spent`` tokens: the reservation covers what it can; the rest, to be
        taken from the day now, is returned."""
        covered = min(self.tokens, max(0, spent))
        self.tokens -= covered
        return max(0, spent) - covered

    def release(self) -> int:
        """The message is done: what its replies left of the reservation, to be given back."""
        left, self.tokens = self.tokens, 0
        return left


class RepliesAtOnce:
    """Replies running at once per user in this worker, at most ``cap`` (0: no cap)."""

    def __init__(self, cap: int):
        self.cap = cap
        self.running: dict[str, int] = {}

    def take(self, user: str) -> bool:
        """One more reply of ``user`` starts; False (and nothing taken) at the cap."""
        if self.cap and self.running.get(user, 0) >= self.cap:
            return False
        self.running[user] = self.running.get(user, 0) + 1
        return True

    def give(self, user: str) -> None:
        """One of ``user``'s replies ended."""
        left = self.running.get(user, 0) - 1
        if left > 0:
            self.running[user] = left
        else:
            self.running.pop(user, None)


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

    async def admit(self, user: str, tokens: int = 0) -> Optional[Refusal]:
        """Count a message of ``user`` and reserve ``tokens`` of its day, or refuse it."""
        now = self.clock()
        keys = [f"{name}:{user}" for name in (MESSAGES, TOKENS)]
        return await self.store.update_keys(
            keys, lambda states: admit(states, self.limits, user, now, tokens), now, LIMIT_KEYS)

    async def spend_tokens(self, user: str, tokens: int) -> None:
        """``tokens`` more on ``user``'s day; negative: given back."""
        if self.limits.tokens is None or tokens == 0:
            return
        now, rate = self.clock(), self.limits.tokens
        await self.store.update_keys([f"{TOKENS}:{user}"],
                                     lambda states: spend_tokens(states, rate, user, tokens, now),
                                     now, LIMIT_KEYS)
